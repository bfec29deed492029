"""`gpupool simulate`: replay a scenario file or a CSV trace through the scheduler on a virtual
clock and report waits, utilization and fairness. Bad input exits with code 2 and a message."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gpupool.cli.simulate_pools import has_pools, simulate_pools
from gpupool.scheduler.types import Policy
from gpupool.sim.scenario import Scenario, ScenarioError, load_scenario

EXIT_BAD_INPUT = 2


class PolicyChoice(StrEnum):
    fair = "fair"
    fifo = "fifo"
    las = "las"


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    return typer.Exit(code)


def simulate_command(
    scenario: Path | None = typer.Argument(
        None,
        help="Scenario YAML (cluster, tenants, workloads, scheduler); see docs/scenarios.md.",
        show_default=False,
    ),
    policy: PolicyChoice | None = typer.Option(
        None,
        "--policy",
        help="fair: gpupool (quotas, fair share, reclaim, backfill); fifo: first come first "
        "served, whole GPUs, no quotas (plain Kubernetes/JupyterHub); las: least attained "
        "service (Tiresias-like). Default: the file's scheduler.policy, else fair.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (workloads, metrics)."
    ),
    trace: Path | None = typer.Option(
        None, "--trace", help="Replay a CSV trace instead (generic or Philly format)."
    ),
    cluster: Path | None = typer.Option(
        None, "--cluster", help="With --trace: cluster/tenants/scheduler YAML (no workloads)."
    ),
    gpus: int | None = typer.Option(
        None, "--gpus", min=1, help="With --trace and no --cluster: cluster size in GPUs."
    ),
    load: float | None = typer.Option(
        None,
        "--load",
        min=0.01,
        help="With --trace and no --cluster: size the cluster so offered load is about this "
        "(1.0 = 100%). Default 1.0.",
    ),
    start: str | None = typer.Option(
        None, "--from", help="With --trace: first submission kept (7d, 86400, or a date)."
    ),
    end: str | None = typer.Option(
        None, "--to", help="With --trace: keep submissions before this (7d, 86400, or a date)."
    ),
    tenants: str | None = typer.Option(
        None, "--tenants", help="With --trace: comma-separated tenants, or top:N (most jobs)."
    ),
    progress: bool | None = typer.Option(
        None, "--progress/--no-progress", help="Progress bar (default: on for traces on a TTY)."
    ),
    checkpointing: bool = typer.Option(
        False,
        "--checkpointing",
        help="With --trace: every job saves its progress when preempted and resumes from it.",
    ),
) -> None:
    """Replay a scenario (or a CSV trace with --trace) through the scheduler on a virtual clock.

    Prints waits, job completion times, GPU utilization, per-tenant shares against fair
    shares, Jain's fairness index and the scheduler's cycle times.
    """
    from gpupool.sim.engine import SimulationError, simulate
    from gpupool.sim.metrics import to_json

    pol = Policy(policy.value) if policy else None
    try:
        if trace is not None:
            if scenario is not None:
                raise ScenarioError(["give either a scenario file or --trace, not both"])
            scen = _trace_scenario(
                trace, cluster, pol, gpus, load, start, end, tenants, checkpointing
            )
        elif scenario is None:
            raise ScenarioError(
                ["give a scenario file (e.g. examples/two-labs.yaml) or --trace FILE.csv"]
            )
        else:
            for flag, v in (
                ("--cluster", cluster),
                ("--gpus", gpus),
                ("--load", load),
                ("--from", start),
                ("--to", end),
                ("--tenants", tenants),
                ("--checkpointing", checkpointing or None),
            ):
                if v is not None:
                    raise ScenarioError([f"{flag} only applies with --trace"])
            if has_pools(scenario):  # node pools (issue 34): fixed against on demand
                return simulate_pools(scenario, pol, as_json)
            scen = load_scenario(scenario, pol)
    except ScenarioError as exc:
        raise _fail(str(exc)) from None

    show_progress = (
        progress if progress is not None else (trace is not None and sys.stderr.isatty())
    )
    try:
        if show_progress:
            with Progress(
                TextColumn("replaying"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} submissions"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            ) as bar:
                task = bar.add_task("replay", total=max(1, len(scen.workloads)))
                result = simulate(
                    scen, progress=lambda done, total: bar.update(task, completed=done, total=total)
                )
        else:
            result = simulate(scen)
    except SimulationError as exc:
        raise _fail(f"the simulation stopped: {exc}", code=1) from None

    out = to_json(result)
    if as_json:
        sys.stdout.write(json.dumps(out, indent=None if trace else 2) + "\n")
        return
    _print_summary(out, scen, show_workloads=trace is None)


def _trace_scenario(
    trace, cluster, pol, gpus, load, start, end, tenants, checkpointing=False
) -> Scenario:
    from gpupool.sim.trace import filter_jobs, load_cluster_file, read_trace, trace_scenario

    if cluster is not None and (gpus is not None or load is not None):
        raise ScenarioError(["--gpus and --load size a default cluster; drop them or --cluster"])
    jobs = filter_jobs(read_trace(trace), start, end, tenants)
    if not jobs:
        raise ScenarioError(["no trace rows left after --from/--to/--tenants"], str(trace))
    cf = load_cluster_file(cluster) if cluster is not None else None
    return trace_scenario(jobs, cf, policy=pol, gpus=gpus, load=load, checkpointing=checkpointing)


def _fmt_s(x: Any) -> str:
    if x is None:
        return "-"
    x = float(x)
    if x < 120:
        return f"{x:.1f} s"
    if x < 7200:
        return f"{x / 60:.1f} min"
    return f"{x / 3600:.2f} h"


def _num(x: Any) -> str:
    return "-" if x is None else f"{float(x):.3f}"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


def _print_summary(out: dict, scen: Scenario, show_workloads: bool) -> None:
    con = Console()
    if not con.is_terminal:
        con = Console(width=140)
    m = out["metrics"]
    if show_workloads and len(out["workloads"]) <= 60:
        t = Table(title="Workloads", title_justify="left")
        for col in ("id", "tenant", "user", "submit", "start", "end", "state", "where", "preempt."):
            t.add_column(col, justify="right" if col in ("submit", "start", "end") else "left")
        for w in out["workloads"]:
            where = ""
            if len(w.get("nodes") or []) > 1:  # a multi-node workload: its nodes
                per = len(w["gpus"]) // len(w["nodes"])
                where = f"{len(w['nodes'])} x {per} GPUs: {','.join(w['nodes'])}"
            elif w["node"]:
                gs = ",".join(
                    str(i) if milli == 1000 else f"{i}:{milli / 1000:g}" for i, milli in w["gpus"]
                )
                where = f"{w['node']} [{gs}]" if gs else w["node"]
            state = w["state"]
            if w.get("reason") and state != "succeeded":
                state += f" ({w['reason']})"
            t.add_row(
                w["id"],
                w["tenant"],
                w["user"],
                f"{w['submit']:g}",
                "-" if w["start"] is None else f"{w['start']:g}",
                "-" if w["end"] is None else f"{w['end']:g}",
                state,
                where,
                str(w["preemptions"] or ""),
            )
        con.print(t)
    s = Table(title=f"Summary ({scen.config.policy} policy)", title_justify="left")
    s.add_column("metric")
    s.add_column("value", justify="right")
    states = ", ".join(f"{v} {k}" for k, v in m["states"].items())
    rows = [
        (
            "cluster",
            f"{len(scen.nodes)} node{'s' if len(scen.nodes) != 1 else ''}, "
            f"{m['capacity_gpus']:g} GPUs",
        ),
        ("workloads", f"{m['workloads']} ({states})"),
        (
            "wait avg / p50 / p95 / p99",
            " / ".join(_fmt_s(m[k]) for k in ("avg_wait", "p50_wait", "p95_wait", "p99_wait")),
        ),
        ("job completion time avg", _fmt_s(m["avg_jct"])),
        ("makespan", _fmt_s(m["makespan"])),
        ("GPU utilization", _pct(m["gpu_utilization"])),
        ("allocation at last submission", _pct(m["allocation_ratio"])),
        (
            "Jain's fairness index",
            "-" if m["jain_fairness"] is None else f"{m['jain_fairness']:.3f}",
        ),
        ("preemptions", str(m["preemptions"])),
        (
            "scheduler cycles",
            f"{m['scheduler']['cycles']:,} "
            f"(total {m['scheduler']['total_ms']:,} ms, p99 {m['scheduler']['p99_cycle_ms']} ms)",
        ),
    ]
    for k, v in rows:
        s.add_row(k, v)
    con.print(s)
    pt = Table(title="Per tenant", title_justify="left")
    for col in (
        "tenant",
        "workloads",
        "GPU-hours",
        "avg wait",
        "share",
        "fair share",
        "guarantee met",
    ):
        pt.add_column(col, justify="left" if col == "tenant" else "right")
    for name, v in m["per_tenant"].items():
        pt.add_row(
            name,
            str(v["workloads"]),
            f"{v['gpu_hours']:,.2f}",
            _fmt_s(v["avg_wait"]),
            _pct(v["share"]),
            _pct(v["fair_share"]),
            _pct(v["guarantee_attainment"]),
        )
    con.print(pt)
    stuck = [w for w in out["workloads"] if w["state"] == "pending"]
    failed = [w for w in out["workloads"] if w["state"] == "failed"]
    if failed:
        con.print(
            f"[yellow]{len(failed)} workload(s) could never run[/], e.g. "
            f"{failed[0]['id']}: {failed[0]['reason']}",
            highlight=False,
        )
    if stuck:
        con.print(
            f"[yellow]{len(stuck)} workload(s) still waiting when nothing else could "
            f"happen[/], e.g. {stuck[0]['id']}: {stuck[0]['reason']}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add `gpupool simulate` to the root app."""
    app.command(
        "simulate",
        help=simulate_command.__doc__,
        no_args_is_help=True,
    )(simulate_command)
