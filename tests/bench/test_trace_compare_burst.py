"""bench/trace_compare.py --trace burst: the synthetic workload runs through the same replay
and its seeds are summarised like the Philly weeks (issue 32)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import trace_compare  # noqa: E402

from gpupool.sim.burst import burst_jobs  # noqa: E402


def test_seeds_scope_expands_and_picks_the_seed():
    assert trace_compare.expand_scopes(["seeds"]) == [f"seed{k}" for k in range(1, 6)]
    assert trace_compare.scope_jobs("burst", "seed4") == burst_jobs(4)
    assert trace_compare.scope_jobs("burst", "full") == burst_jobs(1)


def _fake_run(out: Path, scope: str, policy: str, wait: float, kept: float) -> None:
    rec = {
        "scope": scope,
        "load": 1.2,
        "policy": policy,
        "tag": "",
        "gpus": 8,
        "replay_wall_s": 1,
        "lost_gpu_hours": 0.0,
        "delivered_gpu_hours": 1.0,
        "metrics": {
            "avg_wait": wait,
            "p95_wait": wait,
            "avg_jct": wait,
            "gpu_utilization": 1.0,
            "jain_fairness": 1.0,
            "preemptions": 0,
            "states": {},
            "scheduler": {"cycles": 1, "p99_cycle_ms": 1.0},
            "per_tenant": {"t": {"guarantee_attainment": kept, "guarantee_kept": kept}},
        },
    }
    (out / f"{scope}-1.2-{policy}.json").write_text(json.dumps(rec))


def test_goal_table_has_a_geometric_mean_over_seeds(tmp_path):
    _fake_run(tmp_path, "seed1", "fifo", 100.0, 0.5)
    _fake_run(tmp_path, "seed1", "fair", 25.0, 0.97)
    _fake_run(tmp_path, "seed2", "fifo", 100.0, 0.5)
    _fake_run(tmp_path, "seed2", "fair", 100.0, 0.93)
    table = trace_compare.goals(tmp_path)
    # sqrt(0.25 * 1.0) = 0.5; the lowest seed's guarantee kept
    row = "| seeds (geometric mean of 2) | 1.2 | fair | 0.50 | lowest 93.0% | lowest 93.0% | |"
    assert row in table
    assert "weeks (geometric mean" not in table
