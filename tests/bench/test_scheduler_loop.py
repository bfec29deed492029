"""bench/scheduler_loop.py at a tiny size: the loop runs over a real store, every phase is
timed, and work is admitted and why-pending stored."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scheduler_loop import PHASES, gate, run  # noqa: E402


def test_the_bench_runs_the_loop_and_times_each_phase():
    args = argparse.Namespace(
        nodes=4,
        gpus_per_node=2,
        pending=30,
        tenants=2,
        cycles=3,
        step=600.0,
        policy="fair",
        seed=1,
        db=None,
        digest=True,
        worker=True,
    )
    r = run(args)
    assert set(r["p50_wall_ms"]) == set(PHASES)
    first, *steady = r["per_cycle"]
    assert first["admitted"] > 0 and first["pending"] > 0
    assert all(c["digest"] is not None for c in r["per_cycle"])
    assert all(c["wall"]["snapshot"] > 0 and c["wall"]["total"] > 0 for c in steady)
    # the phases' wrappers are taken off again
    from gpupool.server.loops.scheduler import SchedulerLoop

    assert SchedulerLoop._read.__name__ == "_read"


def test_the_gate_fails_a_slower_or_nondeterministic_loop_and_passes_otherwise():
    ok = {"ratio_best_cpu_total": 1.2, "ratio_cpu": {"total": 1.1}, "deterministic": True}
    assert gate(ok, None) == 0  # no limit asked: report only
    assert gate(ok, 1.5) == 0
    slower = {**ok, "ratio_best_cpu_total": 1.51, "ratio_cpu": {"total": 1.6}}
    assert gate(slower, 1.5) == 1
    # one side's lucky round (best 1.51) or a busy stretch (median 1.6) alone is not a slowdown
    assert gate({**ok, "ratio_best_cpu_total": 1.51}, 1.5) == 0
    assert gate({**ok, "ratio_cpu": {"total": 1.6}}, 1.5) == 0
    assert gate({**ok, "deterministic": False}, 1.5) == 1
