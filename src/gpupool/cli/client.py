"""The user's client commands (`login`, `ls`, `show`, `cancel`, `logs`, `queue`, `usage`,
`mcp`) and the registration of every client command with the root app; `gpupool run` is in
cli/submit.py, the admin's commands in cli/client_admin.py, what they share in cli/base.py.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import Any

import typer
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpupool import client as sdk
from gpupool.cli import (
    client_admin,  # admin commands live beside these
    runtime_policy,  # noqa: F401  (adds `tenant set`)
    tables,
)
from gpupool.cli.base import (
    Api,
    CliError,
    api,
    err,
    handled,
    load_config,
    out,
    print_json,
    save_config,
)
from gpupool.cli.budgets import reservation_app  # also adds `tenant budget`
from gpupool.cli.forecasts import starts_cell, starts_line
from gpupool.cli.submit import run
from gpupool.cli.tables import Col, Output, asks_text
from gpupool.domain import WorkloadState

S = WorkloadState
DEFAULT_URL = sdk.DEFAULT_URL
#: states in which a followed workload has ended for the caller (preempted work may be
#: requeued, but this run of it is over)
TERMINAL = sdk.ENDED


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _gpus_of(w: dict[str, Any]) -> str:
    a = w.get("allocation")
    if not a:
        return ""
    return tables.gpu_list((s["node"], s["gpu_index"]) for s in a["shares"])


# -- user commands ------------------------------------------------------------------------


def login(
    url: str = typer.Option(None, "--url", help="server URL (default: saved, or GPUPOOL_URL)"),
    user: str = typer.Option(None, "--user", "-u", help="user name (default: $USER)"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password"),
) -> None:
    """Log in and save the server URL and a token to ~/.config/gpupool/config.toml."""

    @handled
    def go() -> None:
        base = url or load_config()["url"]
        name = user or os.environ.get("USER") or typer.prompt("user")
        pw = sys.stdin.readline().rstrip("\n") if password_stdin else None
        if pw is None:
            pw = typer.prompt("password", hide_input=True)
        res = Api(base, None).post(
            "/auth/login", {"username": name, "password": pw, "token_name": "cli"}
        )
        path = save_config(base, res["token"])
        roles = ", ".join(f"{m['role']} of {m['tenant']}" for m in res["user"]["memberships"])
        admin = " (admin)" if res["user"]["admin"] else ""
        out.print(f"logged in to {base} as {name}{admin}; {roles or 'no tenant roles'}")
        out.print(f"token saved to {path}")

    go()


def _asks(w: dict[str, Any]) -> str:
    return asks_text(w["request"])


def _state(w: dict[str, Any]) -> str:
    """STATE of `gpupool ls`: running work a reclaim will take says when, in short:
    'running, preempt 03:52' (`gpupool show` says for whom); pending work when it is
    expected to start: 'pending, ~12m' (`gpupool show` says by when at the latest)."""
    forecast = (w.get("pending") or {}).get("forecast")
    if forecast:
        return f"{w['state']}, {starts_cell(forecast).split('..')[0]}"
    plan = w.get("preemption")
    if not plan:
        return str(w["state"])
    at = datetime.fromisoformat(plan["at"].replace("Z", "+00:00")).strftime("%H:%M")
    return f"{w['state']}, preempt {at}"


def _ls_columns(user: bool) -> tuple[Col, ...]:
    """`gpupool ls` columns: the default ones fit 80 columns; `-o wide` adds the rest. USER
    is a default column with `--all` (whose work it is matters when it is not all yours)."""
    return (
        Col("ID", lambda w: w["id"]),
        Col("NAME", lambda w: w["name"], wide=True),
        Col("USER", lambda w: w["owner"], wide=not user),
        Col("TENANT", lambda w: w["tenant"], wide=True),
        Col("KIND", lambda w: w["kind"], wide=True),
        Col("STATE", _state),
        Col("ASKS", _asks),
        Col("GPUS", _gpus_of),
        Col("AGE", lambda w: tables.age(w["submitted_at"])),
        Col("SUBMITTED", lambda w: _when(w["submitted_at"]), wide=True),
    )


LS_COLUMNS = _ls_columns(user=False)
#: `gpupool ls --all`
LS_ALL_COLUMNS = _ls_columns(user=True)


def ls(
    all_: bool = typer.Option(False, "--all", "-a", help="everything you may see, not only yours"),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
    state: list[str] = typer.Option(None, "--state", "-s", help="only these states"),
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
) -> None:
    """List workloads (yours, unless --all, which adds USER): ID, STATE, ASKS, GPUS, AGE;
    -o wide for more."""

    @handled
    def go() -> None:
        c = api()
        params: list[tuple[str, Any]] = [("limit", limit)]
        if not all_:
            params.append(("user", c.get("/auth/me")["name"]))
        params += [("state", s) for s in state or []]
        ws = c.get("/workloads", params=params)
        if tables.wants_json(output, as_json):
            return print_json(ws)
        cols = LS_ALL_COLUMNS if all_ else LS_COLUMNS
        tables.show(out, cols, ws, output, empty="no workloads")

    go()


def show(
    workload_id: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One workload: request, state, allocation (with enforcement), why pending, events."""

    @handled
    def go() -> None:
        w = api().get(f"/workloads/{workload_id}")
        if as_json:
            return print_json(w)
        print_workload(w)

    go()


def print_workload(w: dict[str, Any]) -> None:
    """`gpupool show`: one field a line, long values wrapped under their own column so that
    no line is wider than the terminal (80 columns when piped)."""
    out.print(Text(f"{w['id']} {w['name'] or ''}".rstrip(), style="bold"))
    rows: list[tuple[str, Any]] = [
        ("owner", f"{w['owner']} in {w['tenant']}"),
        ("kind", w["kind"]),
        ("state", w["state"] + (f" ({w['reason']})" if w["reason"] else "")),
        ("asks", w["request"]["description"]),
        ("command", " ".join(w["command"]) or "-"),
        ("priority", w["priority"]),
        ("submitted", _when(w["submitted_at"])),
        ("started", _when(w["started_at"])),
        ("finished", _when(w["finished_at"])),
        ("exit code", w["exit_code"]),
        ("attained", _attained(w)),
    ]
    pins = _pins_text(w["request"])
    if pins:
        rows.insert(4, ("runs on", pins))
    if w.get("pending"):
        p = w["pending"]
        rows.append(("waiting", f"#{p['position']} in the queue: {p['reason']}"))
        if p.get("forecast"):
            rows.append(("starts", starts_line(p["forecast"])))
    if w.get("preemption"):  # a reclaim will take it
        plan = w["preemption"]
        rows.append(("preemption", f"{plan['reason']} (for {plan['for_workload']})"))
    a = w.get("allocation")
    if a:
        held = "released " + _when(a["released_at"]) if a["released_at"] else "held"
        spans = a.get("nodes") or [a["node"]]
        where = a["node"] if len(spans) == 1 else f"{len(spans)} nodes: {', '.join(spans)}"
        rows.append(("allocation", f"{where} ({held})"))
    out.print(_fields(rows, indent=2, key_width=10), soft_wrap=False)
    if a:
        shares = []
        for s in a["shares"]:
            on = f"{s['node']} " if len(spans) > 1 else ""
            shares.append(
                (
                    f"{on}GPU {s['gpu_index']}",
                    f"{s['gpu_uuid']}: {s['milli'] / 1000:g} GPU, {s['memory_mib']} MiB, "
                    f"enforcement {s['enforcement']}",
                )
            )
        out.print(_fields(shares, indent=4), soft_wrap=False)
    out.print("  events")
    events = Table.grid(padding=(0, 2))
    for wrap in (False, False, True):
        events.add_column(no_wrap=not wrap, overflow="fold")
    for e in w["events"]:
        events.add_row(Text(_when(e["at"])), Text(e["kind"]), Text(e["message"]))
    out.print(Padding(events, (0, 0, 0, 4)), soft_wrap=False)


def _pins_text(r: dict[str, Any]) -> str:
    """Where a request is pinned: 'engine slurm; nodes labelled zone=a' ('' if nowhere)."""
    parts = []
    if r.get("engine"):
        parts.append(f"engine {r['engine']}")
    labels = r.get("node_labels") or {}
    if labels:
        parts.append("nodes labelled " + ", ".join(f"{k}={v}" for k, v in labels.items()))
    return "; ".join(parts)


def _fields(rows: list[tuple[str, Any]], indent: int, key_width: int = 0) -> Padding:
    """`key  value` lines; a value too long for the line wraps under itself."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, min_width=key_width)
    grid.add_column(overflow="fold")
    for k, v in rows:
        grid.add_row(Text(k), Text("-" if v is None else str(v)))
    return Padding(grid, (0, 0, 0, indent))


def _attained(w: dict[str, Any]) -> str | None:
    """`attained_gpu_hours` for `show`, with what became of earlier attempts."""
    hours = w.get("attained_gpu_hours")
    if hours is None:  # a server from before the field
        return None
    text = f"{hours:.2f} GPU-hours"
    n = w.get("preemptions") or 0
    if n and w.get("checkpointing"):
        text += f" (kept across {n} preemption{'s' if n > 1 else ''})"
    elif n:
        text += " (this attempt; no checkpointing)"
    return text


def cancel(workload_id: str = typer.Argument(...)) -> None:
    """Cancel a workload (queued: at once; running: stopped, then cancelled)."""

    @handled
    def go() -> None:
        w = api().call("DELETE", f"/workloads/{workload_id}")
        note = "" if w["state"] == S.CANCELLED else " (stopping)"
        out.print(f"{w['id']} {w['state']}{note}")

    go()


def logs(
    workload_id: str = typer.Argument(...),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until it ends"),
    tail: int = typer.Option(None, "--tail", "-n", min=1, help="only the last N lines"),
    poll: float = typer.Option(1.0, "--poll", hidden=True),
) -> None:
    """Print a job's output: every run's, in order (a run after a preemption follows a
    '--- requeued after preemption' line). A note on stderr says when it was preempted."""

    @handled
    def go() -> None:
        c = api()
        if tail:
            page = c.get(f"/workloads/{workload_id}/logs", params={"tail": tail})
            out.out(page["text"], end="")
        elif not follow:
            for page in c.log_pages(workload_id):
                out.out(page["text"], end="")
        if not follow:
            if page.get("note"):
                err.print(f"note: {page['note']}")
            return
        for _, _, text in c.follow(workload_id, poll):
            if text:
                out.out(text, end="")

    go()


QUEUE_COLUMNS = (
    Col("#", lambda e: e["position"], right=True),
    Col("ID", lambda e: e["workload"]["id"]),
    Col("USER", lambda e: e["workload"]["owner"], wide=True),
    Col("TENANT", lambda e: e["workload"]["tenant"]),
    Col("KIND", lambda e: e["workload"]["kind"], wide=True),
    Col("PRIORITY", lambda e: e["workload"]["priority"], wide=True, right=True),
    Col("ASKS", lambda e: asks_text(e["workload"]["request"])),
    Col("AGE", lambda e: tables.age(e["workload"]["submitted_at"]), wide=True),
    Col("STARTS", lambda e: starts_cell(e.get("forecast")), sparse=True),
    Col("WHY IT WAITS", lambda e: e["reason"], wrap=True),
)


def queue(
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
    tenant: str = typer.Option(None, "--tenant", "-t", help="only this tenant (and below)"),
) -> None:
    """Pending workloads, in order, with the reason each one waits."""

    @handled
    def go() -> None:
        q = api().get("/queue", params={"tenant": tenant} if tenant else {})
        if tables.wants_json(output, as_json):
            return print_json(q)
        tables.show(out, QUEUE_COLUMNS, q, output, empty="nothing is waiting")

    go()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _measured(r: dict[str, Any], text: str) -> str:
    """`text`, or - where telemetry measured nothing of the row (not a measured zero)."""
    return text if r.get("gpu_seconds_measured", 1) > 0 else "-"


def _busy_known(r: dict[str, Any], text: str) -> str:
    """`text`, or - where telemetry neither measured nor estimated busy time of the row;
    ~`text` where part of it is estimated (MPS shares, docs/telemetry.md), not measured."""
    estimated = r.get("gpu_seconds_estimated", 0)
    known = r.get("gpu_seconds_measured", 1) + estimated
    return "-" if known <= 0 else f"~{text}" if estimated > 0 else text


def usage_columns(by: str) -> tuple[Col, ...]:
    return (
        Col(by.upper(), lambda r: r["key"]),
        Col("GPU-H ALLOC", lambda r: f"{r['gpu_hours_allocated']:.2f}", right=True),
        Col("GPU-H BUSY", lambda r: _busy_known(r, f"{r['gpu_hours_busy']:.2f}"), right=True),
        Col("EFFICIENCY", lambda r: _busy_known(r, _pct(r["efficiency"])), right=True),
        Col(
            "MAX MiB",
            lambda r: _measured(r, str(r["gpu_memory_mib_max"])),
            wide=True,
            right=True,
        ),
        Col("WORKLOADS", lambda r: r["workloads"], wide=True, right=True),
    )


def usage(
    by: str = typer.Option("tenant", "--by", help="user, tenant or day (export: or model)"),
    from_: str = typer.Option(None, "--from", help="first day, YYYY-MM-DD"),
    to: str = typer.Option(None, "--to", help="last day, YYYY-MM-DD"),
    export: str = typer.Option(
        None, "--export", help="csv or json: chargeback (GPU-h, memory, energy) on stdout"
    ),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
) -> None:
    """GPU-hours allocated and busy, and efficiency (~: partly estimated, MPS shares);
    --export for chargeback."""

    @handled
    def go() -> None:
        if export is not None:  # issue 35: chargeback (gpupool.cli.budgets)
            from gpupool.cli.budgets import export_usage

            return export_usage(export, by, from_, to)
        params = {"group_by": by} | {k: v for k, v in (("from", from_), ("to", to)) if v}
        rep = api().get("/usage", params=params)
        if tables.wants_json(output, as_json):
            return print_json(rep)
        tables.show(out, usage_columns(by), rep["rows"], output, empty="no usage in this range")

    go()


def mcp(
    allow_submit: bool = typer.Option(
        False, "--allow-submit", help="also the submit and cancel tools (as you)"
    ),
) -> None:
    """Serve gpupool's tools to an AI assistant: the Model Context Protocol on stdio, as you
    (your gpupool login or GPUPOOL_TOKEN). Read-only unless --allow-submit."""

    @handled
    def go() -> None:
        from gpupool.cli.assistant import build_server  # the mcp package loads only here

        cfg = load_config()
        if not cfg.get("token"):
            raise CliError("not logged in: run gpupool login (or set GPUPOOL_TOKEN)")
        build_server(cfg["url"], cfg["token"], allow_submit=allow_submit).run("stdio")

    go()


def register(app: typer.Typer) -> None:
    """Add the client commands (user and admin) to the root app."""
    app.command()(login)
    app.command(
        context_settings={"allow_interspersed_args": False},
        epilog="Example: gpupool run --gpus 1 --gpu-model H100 -- python3 train.py",
    )(run)
    app.command("ls")(ls)
    app.command()(show)
    app.command()(cancel)
    app.command()(logs)
    app.command()(queue)
    app.command()(usage)
    app.add_typer(reservation_app, name="reservation")
    app.command()(mcp)
    client_admin.register(app)
