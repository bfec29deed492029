"""CLI commands for GPU telemetry: `gpupool devices`, `gpupool top`, `gpupool exporter`.

They run standalone on a node (no server needed): real GPUs through NVML, or simulated
ones with `--simulate 4xH100-80GB,2xA100-40GB`, always labelled as simulated.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gpupool.telemetry.attribution import Attributor
from gpupool.telemetry.frame_json import frame_view
from gpupool.telemetry.sampler import Frame, Sampler
from gpupool.telemetry.simulated import SpecError
from gpupool.telemetry.source import GPUSource, TelemetryError, open_source

SIMULATE_HELP = "Use simulated GPUs, e.g. 4xH100-80GB,2xA100-40GB (no GPU needed)."


def _fail(message: str, code: int = 1) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _open(simulate: str | None) -> GPUSource:
    try:
        return open_source(simulate)
    except SpecError as exc:
        raise _fail(str(exc), 2) from None
    except TelemetryError as exc:
        raise _fail(str(exc)) from None


def _num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "N/A" if value is None else fmt.format(value) + unit


def _bar(value: float | None, total: float | None) -> Any:
    if value is None or not total:
        return Text("N/A", style="dim")
    return ProgressBar(total=total, completed=min(value, total), width=18)


def _devices_table(data: dict[str, Any]) -> Table:
    sim = " [bold magenta](SIMULATED)[/]" if data["simulated"] else ""
    table = Table(
        title=f"GPUs on {data['hostname']}{sim} - driver {data['driver_version'] or 'N/A'}, "
        f"CUDA {data['cuda_version'] or 'N/A'}",
        title_justify="left",
    )
    for col in (
        "#",
        "model",
        "UUID",
        "memory used/total",
        "util",
        "temp",
        "power",
        "MIG",
        "procs",
        "health",
    ):
        table.add_column(col)
    mib = 1024 * 1024
    for g in data["gpus"]:
        used = g["memory_used_bytes"]
        total = g["memory_total_bytes"]
        mem = "N/A" if total is None else f"{(used or 0) / mib:,.0f} / {total / mib:,.0f} MiB"
        mig = "N/A" if g["mig_enabled"] is None else ("on" if g["mig_enabled"] else "off")
        health = "[green]healthy[/]" if g["healthy"] else "[red]UNHEALTHY[/]"
        if g["errors"]:
            health += f" [yellow]({len(g['errors'])} errors)[/]"
        table.add_row(
            str(g["index"]),
            g["name"],
            g["uuid"],
            mem,
            _num(g["util_gpu"], unit="%"),
            _num(g["temperature_c"], unit=" C"),
            _num(g["power_w"], unit=" W"),
            mig,
            str(len(g["processes"])),
            health,
        )
    return table


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
    simulate: str | None = typer.Option(None, "--simulate", help=SIMULATE_HELP),
) -> None:
    """List this host's GPUs: model, UUID, memory, utilization, health."""
    source = _open(simulate)
    try:
        data = source.snapshot().to_dict()
    finally:
        source.close()
    if json_out:
        typer.echo(json.dumps(data, indent=2))
    else:
        Console().print(_devices_table(data))


def top(
    simulate: str | None = typer.Option(None, "--simulate", help=SIMULATE_HELP),
    once: bool = typer.Option(False, "--once", help="Print one screen and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (one object per sample)."),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between samples."),
) -> None:
    """Live view of GPUs and their processes with owners, shares and idle flags."""
    source = _open(simulate)
    sampler = Sampler(source, interval_s=interval, attributor=Attributor())
    try:
        if once or json_out:
            while True:
                frame = sampler.sample_once()
                if json_out:
                    typer.echo(json.dumps(frame_view(frame), indent=2 if once else None))
                else:
                    Console().print(render_top(frame))
                if once:
                    return
                time.sleep(interval)
        from rich.live import Live

        with Live(render_top(sampler.sample_once()), auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render_top(sampler.sample_once()), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        source.close()


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
