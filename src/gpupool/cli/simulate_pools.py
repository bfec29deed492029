"""`gpupool simulate` on a scenario with `node_pools:` (issue 34): the same work on the pools
kept at their maximum all along (fixed) and asked for on demand (the file's settings), with
GPU-hours bought, cost and waits for each (gpupool.sim.autoscale)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpupool.scheduler.types import Policy
from gpupool.sim.autoscale import PoolPolicy, PoolReport, load_pool_scenario, replay_pools
from gpupool.sim.scenario import read_yaml


def has_pools(path: Path) -> bool:
    """Whether the scenario file lists node_pools (a bad file: False; the loader says why)."""
    try:
        data = read_yaml(path)
    except Exception:  # noqa: BLE001 - load_scenario reports the problem
        return False
    return isinstance(data, dict) and "node_pools" in data


def _minutes(s: float) -> str:
    return f"{s / 60:,.1f}m"


def simulate_pools(path: Path, policy: Policy | None, as_json: bool) -> None:
    """Replay the scenario under both policies and print the comparison."""
    scen, pools = load_pool_scenario(path, policy)
    reports: list[PoolReport] = [
        replay_pools(scen, PoolPolicy("fixed", tuple(pools), fixed=True)),
        replay_pools(scen, PoolPolicy("on demand", tuple(pools))),
    ]
    if as_json:
        print(json.dumps({"policies": [r.as_dict() for r in reports]}, indent=2))
        return
    out = Console()
    t = Table(title=f"{path.name}: {len(scen.workloads)} workloads, {len(pools)} node pool(s)")
    for col in ("policy", "GPU-h", "cost", "used", "wait", "p95", "max"):
        t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in reports:
        t.add_row(
            r.policy,
            f"{r.gpu_hours_bought:,.1f}",
            f"{r.cost:,.2f}",
            f"{r.utilization:.0%}",
            _minutes(r.mean_wait_s),
            _minutes(r.p95_wait_s),
            _minutes(r.max_wait_s),
        )
    out.print(t)
    out.print(
        "fixed: every pool at max_nodes all along; on demand: nodes asked for when work waits "
        "for capacity, given back after idle_seconds. GPU-h: GPU-hours paid (booting "
        "included); used: of them, held by work; wait: mean, p95, max."
    )
    if any(r.never_ran for r in reports):
        out.print(f"{reports[0].never_ran} workload(s) could never run on these nodes")
