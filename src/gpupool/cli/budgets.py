"""`gpupool tenant budget ...` (GPU-hour budgets), `gpupool reservation ...` (advance
reservations) and the chargeback export behind `gpupool usage --export` (issue 35)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import typer

from gpupool.api.budgets import ChargebackOut, chargeback_csv
from gpupool.cli import tables
from gpupool.cli.base import CliError, api, handled, out, parse_duration, print_json
from gpupool.cli.client_admin import tenant_app
from gpupool.cli.tables import Col, Output

budget_app = typer.Typer(
    help="GPU-hour budgets per month or quarter (admins set them; tenant-admins read them).",
    no_args_is_help=True,
)
reservation_app = typer.Typer(
    help="Advance reservations: GPUs booked for a tenant or some users over a time window.",
    no_args_is_help=True,
)
tenant_app.add_typer(budget_app, name="budget")


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _hours(h: float) -> str:
    return f"{h:.1f}".rstrip("0").rstrip(".")


BUDGET_COLUMNS = (
    Col("ID", lambda b: b["id"], right=True),
    Col("TENANT", lambda b: b["tenant"]),
    Col("PERIOD", lambda b: b["period_label"]),
    Col("MODEL", lambda b: b["model"] or "all"),
    Col("USED/BUDGET", lambda b: f"{_hours(b['used_gpu_hours'])}/{_hours(b['gpu_hours'])} h"),
    Col("MODE", lambda b: b["mode"]),
    Col("STATE", lambda b: "over" if b["over"] else "ok"),
    Col("RESETS (UTC)", lambda b: _utc(b["resets_at"]), wide=True),
)


@budget_app.command("ls")
def budget_ls(
    tenant: str = typer.Option(None, "--tenant", help="only this tenant's subtree"),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
) -> None:
    """Budgets and the GPU-hours used in the current period (UTC calendar month/quarter)."""

    @handled
    def go() -> None:
        rows = api().get("/budgets", params={"tenant": tenant} if tenant else {})
        if tables.wants_json(output, as_json):
            return print_json(rows)
        tables.show(out, BUDGET_COLUMNS, rows, output, empty="no budgets")

    go()


@budget_app.command("set")
def budget_set(
    tenant: str = typer.Argument(..., help="tenant path, e.g. physics/lab-a"),
    gpu_hours: float = typer.Argument(..., help="GPU-hours per period (0 or more)"),
    period: str = typer.Option("month", "--period", help="month or quarter (UTC calendar)"),
    mode: str = typer.Option(
        "warn", "--mode", help="warn, borrow-only (idle GPUs only, preempted first) or hold"
    ),
    model: str = typer.Option(None, "--model", help="count only this GPU model"),
) -> None:
    """Set (or replace) a tenant's GPU-hour budget for a period (admins)."""

    @handled
    def go() -> None:
        body = {"tenant": tenant, "gpu_hours": gpu_hours, "period": period, "mode": mode}
        if model:
            body["model"] = model
        b = api().call("PUT", "/budgets", json=body)
        out.print(
            f"budget {b['id']}: {b['tenant']} {_hours(b['gpu_hours'])} GPU-hours per "
            f"{b['period']} ({b['mode']}); used {_hours(b['used_gpu_hours'])} in "
            f"{b['period_label']}"
        )

    go()


@budget_app.command("rm")
def budget_rm(budget_id: int = typer.Argument(..., help="the ID `budget ls` shows")) -> None:
    """Remove a budget (admins)."""

    @handled
    def go() -> None:
        api().call("DELETE", f"/budgets/{budget_id}")
        out.print(f"budget {budget_id} removed")

    go()


RESERVATION_COLUMNS = (
    Col("ID", lambda r: r["id"]),
    Col("TENANT", lambda r: r["tenant"]),
    Col("GPUS", lambda r: f"{r['gpus']} {r['model'] or ''}".strip(), right=True),
    Col("START (UTC)", lambda r: _utc(r["start"])),
    Col("END (UTC)", lambda r: _utc(r["end"])),
    Col("STATE", lambda r: r["state"]),
    Col("NAME", lambda r: r["name"], wide=True),
    Col("USERS", lambda r: ",".join(r["users"]) or "all", wide=True),
    Col("KEPT", lambda r: " ".join(r["kept"]), wide=True, wrap=True),
)


def parse_time(text: str, flag: str) -> float:
    """'now', '2026-12-01', '2026-12-01 09:00' or ISO 8601 (UTC unless an offset is given)
    -> epoch seconds; CliError (exit 2) otherwise."""
    if text.strip().lower() == "now":
        return datetime.now(UTC).timestamp()
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(
            f"{flag} {text!r}: give a time like 2026-12-01 09:00 (UTC) or 'now'", 2
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


@reservation_app.command("ls")
def reservation_ls(
    past: bool = typer.Option(False, "--past", help="also reservations whose window is over"),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
) -> None:
    """Reservations of the tenants you have a role in (all of them for admins)."""

    @handled
    def go() -> None:
        rows = api().get("/reservations", params={"past": "true"} if past else {})
        if tables.wants_json(output, as_json):
            return print_json(rows)
        tables.show(out, RESERVATION_COLUMNS, rows, output, empty="no reservations")

    go()


@reservation_app.command("add")
def reservation_add(
    tenant: str = typer.Argument(..., help="the tenant it is for"),
    gpus: int = typer.Argument(..., help="how many whole GPUs"),
    start: str = typer.Option(..., "--start", help="'2026-12-01 09:00' (UTC) or 'now'"),
    end: str = typer.Option(None, "--end", help="when it ends (or give --for)"),
    duration: str = typer.Option(None, "--for", help="how long, e.g. 3h or 2d"),
    model: str = typer.Option(None, "--model", help="GPU model, e.g. H100"),
    users: list[str] = typer.Option([], "--user", help="only these users (repeat the flag)"),
    nodes: list[str] = typer.Option([], "--node", help="only on these nodes (repeat)"),
    name: str = typer.Option("", "--name", help="a name, e.g. course-ml101"),
) -> None:
    """Book GPUs for a tenant or some of its users over a window (admins; tenant-admins
    within the tenant's guarantee)."""

    @handled
    def go() -> None:
        t0 = parse_time(start, "--start")
        if (end is None) == (duration is None):
            raise CliError("give --end or --for (not both)", 2)
        t1 = parse_time(end, "--end") if end is not None else t0 + parse_duration(duration, "--for")
        body: dict[str, Any] = {"tenant": tenant, "gpus": gpus, "start": t0, "end": t1}
        body |= {"users": users, "nodes": nodes, "name": name}
        if model:
            body["model"] = model
        r = api().post("/reservations", body)
        out.print(
            f"reservation {r['id']}: {r['gpus']} {r['model'] or ''} GPUs for {r['tenant']} "
            f"from {_utc(r['start'])} to {_utc(r['end'])} UTC".replace("  ", " ")
        )

    go()


@reservation_app.command("rm")
def reservation_rm(reservation_id: str = typer.Argument(..., help="the ID `ls` shows")) -> None:
    """Cancel a reservation (admins, and the tenant's tenant-admins)."""

    @handled
    def go() -> None:
        api().call("DELETE", f"/reservations/{reservation_id}")
        out.print(f"reservation {reservation_id} cancelled")

    go()


def export_usage(fmt: str, by: str, from_: str | None, to: str | None) -> None:
    """`gpupool usage --export csv|json`: the chargeback report on stdout."""
    if fmt not in ("csv", "json"):
        raise CliError(f"--export {fmt!r}: give csv or json", 2)
    if by not in ("tenant", "user", "model"):
        raise CliError(f"--by {by!r}: an export is by tenant, user or model", 2)
    params = {"by": by} | {k: v for k, v in (("from", from_), ("to", to)) if v}
    rep = api().get("/usage/chargeback", params=params)
    if fmt == "json":
        return print_json(rep)
    sys.stdout.write(chargeback_csv(ChargebackOut.model_validate(rep)))
