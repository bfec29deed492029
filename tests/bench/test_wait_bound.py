"""bench/wait_bound.py: the length-aware replay orders a team's jobs shortest first."""

from __future__ import annotations

import sys
from pathlib import Path

from gpupool.scheduler.types import Policy
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import waits
from gpupool.sim.trace import TraceJob, trace_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from wait_bound import by_length  # noqa: E402


def _jobs() -> list[TraceJob]:
    # one 8-GPU node's worth: a blocker, then a long job and a short one behind it
    spec = [("blocker", 0, 3600, 8), ("long", 1, 36000, 8), ("short", 2, 600, 8)]
    return [TraceJob(i, s, d, "team", "u", g, 0) for i, s, d, g in spec]


def test_priorities_follow_length_in_bins_of_two():
    scen = by_length(trace_scenario(_jobs(), policy=Policy.FAIR, gpus=8))
    prio = {sw.workload.id: sw.workload.priority for sw in scen.workloads}
    assert prio["short"] > prio["blocker"] > prio["long"]


def test_knowing_lengths_lets_the_short_job_go_first():
    scen = trace_scenario(_jobs(), policy=Policy.FAIR, gpus=8)
    plain = waits(simulate(scen))
    known = waits(simulate(by_length(trace_scenario(_jobs(), policy=Policy.FAIR, gpus=8))))
    assert plain["short"] > plain["long"]  # submit order: the long job went first
    assert known["short"] < known["long"]
