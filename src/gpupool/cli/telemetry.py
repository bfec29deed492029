"""CLI commands for GPU telemetry: `gpupool devices`, `gpupool top`, `gpupool exporter`.

`devices` and `top` show the GPUs of the server you are logged in to (through its API; see
cli/cluster_view.py). Not logged in, or with `--local`, they read this host's GPUs through
NVML; with `--simulate 4xH100-80GB,2xA100-40GB`, simulated ones, always labelled as simulated.
`exporter` always serves this host's GPUs (no server needed).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gpupool.cli import cluster_view, tables
from gpupool.cli.base import Api, CliError, load_config
from gpupool.cli.tables import Col, Output
from gpupool.telemetry.attribution import Attributor
from gpupool.telemetry.frame_json import frame_view
from gpupool.telemetry.opening import open_source
from gpupool.telemetry.sampler import Frame, Sampler
from gpupool.telemetry.simulated import SpecError
from gpupool.telemetry.source import GPUSource, NoGPUError, TelemetryError

T = TypeVar("T")
MIB = 1024 * 1024

SIMULATE_HELP = "Use simulated GPUs, e.g. 4xH100-80GB,2xA100-40GB (no GPU needed)."
LOCAL_HELP = "This host's GPUs through NVML, even when logged in to a server."


def _fail(message: str, code: int = 1) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _open(simulate: str | None, logged_out: bool = False) -> GPUSource:
    """This host's GPU source; `logged_out`: also say that logging in shows a server's GPUs."""
    try:
        return open_source(simulate)
    except SpecError as exc:
        raise _fail(str(exc), 2) from None
    except NoGPUError as exc:
        if logged_out:
            raise _fail(
                f"{exc} You are not logged in to a gpupool server either: run gpupool login "
                "--url URL to see the server's GPUs (--local then still reads this host's)."
            ) from None
        raise _fail(str(exc)) from None
    except TelemetryError as exc:
        raise _fail(str(exc)) from None


def _server(simulate: str | None, local: bool) -> Api | None:
    """The server to show, if logged in to one and neither --local nor --simulate is given."""
    if simulate or local:
        return None
    try:
        cfg = load_config()
    except CliError as exc:
        raise _fail(str(exc)) from None
    return Api(cfg["url"], cfg["token"]) if cfg.get("token") else None


def _cluster(c: Api) -> dict[str, Any]:
    try:
        return cluster_view.fetch(c)
    except CliError as exc:
        raise _fail(f"{exc} (or use --local for this host's GPUs)", exc.code) from None


def _num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "N/A" if value is None else fmt.format(value) + unit


def _bar(value: float | None, total: float | None) -> Any:
    if value is None or not total:
        return Text("N/A", style="dim")
    return ProgressBar(total=total, completed=min(value, total), width=18)


def _mem(g: dict[str, Any]) -> str:
    used, total = g["memory_used_bytes"], g["memory_total_bytes"]
    return "N/A" if total is None else f"{(used or 0) / MIB:,.0f} / {total / MIB:,.0f} MiB"


def _health(g: dict[str, Any]) -> str:
    health = "healthy" if g["healthy"] else "UNHEALTHY"
    return health + (f" ({len(g['errors'])} errors)" if g["errors"] else "")


def _mig(g: dict[str, Any]) -> str:
    return "N/A" if g["mig_enabled"] is None else ("on" if g["mig_enabled"] else "off")


#: `gpupool devices --local` columns (-o wide adds UUID, MIG and the process count).
LOCAL_DEVICE_COLUMNS = (
    Col("#", lambda g: g["index"], right=True),
    Col("MODEL", lambda g: g["name"]),
    Col("UUID", lambda g: g["uuid"], wide=True),
    Col("MEMORY USED/TOTAL", _mem, right=True),
    Col("UTIL", lambda g: _num(g["util_gpu"], unit="%"), right=True),
    Col("TEMP", lambda g: _num(g["temperature_c"], unit=" C"), right=True),
    Col("POWER", lambda g: _num(g["power_w"], unit=" W"), right=True),
    Col("MIG", _mig, wide=True),
    Col("PROCS", lambda g: len(g["processes"]), wide=True, right=True),
    Col("HEALTH", _health),
)


def _print_local_devices(console: Console, data: dict[str, Any], output: Output) -> None:
    title = Text(f"GPUs on {data['hostname']}", style="bold")
    if data["simulated"]:
        title.append(" (SIMULATED)", style="bold magenta")
    title.append(
        f" - driver {data['driver_version'] or 'N/A'}, CUDA {data['cuda_version'] or 'N/A'}"
    )
    console.print(title)
    tables.show(console, LOCAL_DEVICE_COLUMNS, data["gpus"], output, empty="no GPUs")


def render_top(frame: Frame) -> Group:
    """The Rich renderable of one `gpupool top` screen."""
    v = frame_view(frame)
    parts: list[Any] = []
    head = Text(f"gpupool top - {v['hostname']}  ", style="bold")
    if v["simulated"]:
        head.append("SIMULATED GPUs", style="bold magenta")
    else:
        head.append(f"driver {v['driver_version'] or 'N/A'}  CUDA {v['cuda_version'] or 'N/A'}")
    parts.append(head)
    gpus = Table(box=None, expand=False, pad_edge=False)
    for col in ("GPU", "model", "util", "", "memory", "", "temp", "power", "held by", "flags"):
        gpus.add_column(col)
    for g in v["gpus"]:
        flags = []
        if not g["healthy"]:
            flags.append("[red]UNHEALTHY[/]")
        if g["idle"]:
            flags.append("[yellow]IDLE[/]")
        if any(d["kind"] != "idle" for d in g["detections"]):
            flags.append("[red]POLICY[/]")
        if g["errors"] and g["healthy"]:
            flags.append(f"[yellow]{len(g['errors'])} N/A errors[/]")
        used, total = g["memory_used_mib"], g["memory_total_mib"]
        mem = "N/A" if total is None else f"{(used or 0) / 1024:.1f}/{total / 1024:.0f} GiB"
        gpus.add_row(
            str(g["index"]),
            g["name"],
            _bar(g["util_gpu"], 100),
            _num(g["util_gpu"], unit="%"),
            _bar(used, total),
            mem,
            _num(g["temperature_c"], unit="C"),
            _num(g["power_w"], unit="W"),
            ", ".join(g["held_by"]) or "-",
            " ".join(flags),
        )
    parts.append(gpus)
    procs = Table(title="processes", title_justify="left", expand=False)
    for col in (
        "GPU",
        "PID",
        "type",
        "user",
        "tenant",
        "workload",
        "GPU mem",
        "SM",
        "share",
        "enforcement",
        "command",
    ):
        procs.add_column(col)
    for g in v["gpus"]:
        for p in g["processes"]:
            share = "-"
            if p["share_milli"] is not None:
                share = f"{p['share_milli'] / 1000:g} GPU, {p['share_memory_mib']} MiB"
            user = p["user"] or p["unix_user"] or "?"
            workload = p["workload"] or "[yellow]unowned[/]"
            procs.add_row(
                str(g["index"]),
                str(p["pid"]),
                p["kind"],
                user,
                p["tenant"] or "-",
                workload,
                _num(p["memory_mib"], unit=" MiB"),
                _num(p["sm_util"], unit="%"),
                share,
                p["enforcement"] or "-",
                p["command"] or "?",
            )
    parts.append(procs if procs.row_count else Text("no GPU processes", style="dim"))
    dets = [d for g in v["gpus"] for d in g["detections"]]
    if dets:
        parts.append(
            Panel(
                "\n".join(f"{d['kind']}: {d['message']}" for d in dets),
                title="detections",
                border_style="yellow",
            )
        )
    return Group(*parts)


def devices(
    json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
    output: Output = tables.output_option(),
    local: bool = typer.Option(False, "--local", help=LOCAL_HELP),
    simulate: str | None = typer.Option(None, "--simulate", help=SIMULATE_HELP),
) -> None:
    """List GPUs: the server's when logged in, else this host's (--local: always this host's)."""
    as_json = tables.wants_json(output, json_out)
    c = _server(simulate, local)
    if c is not None:
        data = _cluster(c)
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        else:
            cluster_view.print_devices(Console(), data, c.url, output)
        return
    source = _open(simulate, logged_out=not local)
    try:
        data = source.snapshot().to_dict()
    finally:
        source.close()
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print_local_devices(Console(), data, output)


def top(
    simulate: str | None = typer.Option(None, "--simulate", help=SIMULATE_HELP),
    local: bool = typer.Option(False, "--local", help=LOCAL_HELP),
    once: bool = typer.Option(
        False, "--once", help="Print one screen and exit (what it does when piped)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (one object per sample)."),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between samples."),
) -> None:
    """Live view of GPUs and who holds them: the server's when logged in (GPUs and the
    workloads holding them), else this host's (processes with owners, shares, idle flags)."""
    c = _server(simulate, local)
    if c is not None:
        server = c
        _top_loop(
            lambda: _cluster(server),
            lambda d: d,
            lambda d: cluster_view.render_top(d, server.url),
            once=once,
            json_out=json_out,
            interval=interval,
        )
        return
    source = _open(simulate, logged_out=not local)
    sampler = Sampler(source, interval_s=interval, attributor=Attributor())
    try:
        _top_loop(
            sampler.sample_once,
            frame_view,
            render_top,
            once=once,
            json_out=json_out,
            interval=interval,
        )
    finally:
        source.close()


def _top_loop(
    sample: Callable[[], T],
    view: Callable[[T], Any],
    render: Callable[[T], RenderableType],
    *,
    once: bool,
    json_out: bool,
    interval: float,
) -> None:
    """Sample, then print JSON (`view`) or a screen (`render`): once, or every `interval` s.
    Not on a terminal (piped, redirected), a screen is printed once, as with `--once`: a
    live screen redraws in place, which a pipe or a file cannot show."""
    once = once or (not json_out and not sys.stdout.isatty())
    try:
        if once or json_out:
            while True:
                x = sample()
                if json_out:
                    typer.echo(json.dumps(view(x), indent=2 if once else None))
                else:
                    tables.print_fit(Console(), render(x))
                if once:
                    return
                time.sleep(interval)
        from rich.live import Live

        with Live(render(sample()), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(sample()), refresh=True)
    except KeyboardInterrupt:
        pass


def exporter(
    simulate: str | None = typer.Option(None, "--simulate", help=SIMULATE_HELP),
    port: int = typer.Option(9400, "--port", min=0, max=65535, help="Port for /metrics."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on (0.0.0.0 for Prometheus elsewhere)."
    ),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between samples."),
) -> None:
    """Serve DCGM-compatible and gpupool GPU metrics on /metrics (no server needed)."""
    from gpupool.telemetry.exporter import serve

    source = _open(simulate)
    sampler = Sampler(source, interval_s=interval, attributor=Attributor())
    sampler.sample_once()
    try:
        server = serve(lambda: sampler.latest, port=port, host=host)
    except TelemetryError as exc:
        source.close()
        raise _fail(str(exc)) from None
    label = " (SIMULATED GPUs)" if source.simulated else ""
    typer.echo(f"serving http://{host}:{server.server_port}/metrics{label}; Ctrl-C stops")
    stop = threading.Event()
    try:
        sampler.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.shutdown()
        source.close()


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("devices")(devices)
    app.command("top")(top)
    app.command("exporter")(exporter)


if __name__ == "__main__":  # `python -m gpupool.cli.telemetry ...` without the rest of the CLI
    _app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    register(_app)
    _app()
