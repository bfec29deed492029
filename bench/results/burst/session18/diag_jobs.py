"""One burst replay (as burst_one.py / burst_sweep.py's `one`: trace_scenario(burst_jobs(seed),
load=1.2, checkpointing=True), min_cycle_gap_s=GAP, simulate) writing one row per job, for the
wait breakdown of session18/diag_seed1.md (analysis: diag_breakdown.py).

    PYTHONPATH=src python3 bench/results/burst/session18/diag_jobs.py VARIANT SEED GAP OUTDIR

VARIANT: fifo | fair | oracle (fair + wait_bound.by_length priorities) | NAME:KEY=V;KEY=V
(SchedulerConfig overrides on fair, as burst_sweep.py).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "bench"))

from trace_compare import config_overrides  # noqa: E402
from wait_bound import by_length  # noqa: E402

from gpupool.scheduler.types import Policy  # noqa: E402
from gpupool.sim import engine as _engine  # noqa: E402
from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import simulate  # noqa: E402
from gpupool.sim.metrics import compute_metrics  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402

#: instrumentation (this script only, the product code is unchanged): every preemption as
#: (workload id, reason, time) and every move of the relative-levels scale as (time, ladder)
PREEMPTS: list = []
SCALES: list = []
_orig_preempt = _engine.Simulator._preempt
_orig_relevel = _engine.Simulator._relevel


def _preempt(self, wid, reason, t):
    PREEMPTS.append((wid, reason, t))
    return _orig_preempt(self, wid, reason, t)


def _relevel(self, t):
    before = self.levels
    out = _orig_relevel(self, t)
    if self.levels != before:
        SCALES.append((t, list(self.levels)))
    return out


_engine.Simulator._preempt = _preempt
_engine.Simulator._relevel = _relevel


def main() -> None:
    variant, seed, gap, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    name, _, sets = variant.partition(":")
    policy = Policy.FIFO if name == "fifo" else Policy.FAIR
    jobs = burst_jobs(seed)
    scen = trace_scenario(jobs, policy=policy, load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if sets:
        scen.config = dataclasses.replace(scen.config, **config_overrides(sets.split(";")))
    if name == "oracle":
        scen = by_length(scen)
    t0 = time.process_time()
    r = simulate(scen)
    m = compute_metrics(r)
    gpus = {j.id: j.gpus for j in jobs}
    rows = []
    for wid, rec in r.records.items():
        w = rec.workload
        rows.append(
            [
                wid,
                w.tenant,
                gpus.get(wid),
                rec.duration,
                w.submitted_at,
                rec.first_start,
                w.finished_at,
                rec.run_time,
                w.preemptions,
                str(w.state),
            ]
        )
    res = {
        "variant": variant,
        "seed": seed,
        "gap": gap,
        "cpu_s": round(time.process_time() - t0, 1),
        "avg_wait": m["avg_wait"],
        "preemptions": m["preemptions"],
        "kept": {t: v["guarantee_kept"] for t, v in m["per_tenant"].items()},
        "guarantees": r.guarantees,
        "capacity_milli": r.capacity_milli,
        "cols": [
            "id",
            "tenant",
            "gpus",
            "duration",
            "submit",
            "first_start",
            "finished",
            "run_time",
            "preemptions",
            "state",
        ],
        "rows": rows,
        "preempts": PREEMPTS,
        "scales": SCALES,
    }
    p = Path(out) / f"{name}-seed{seed}-gap{gap:g}.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(res, f)
    print(variant, seed, gap, res["avg_wait"], res["preemptions"], res["cpu_s"], flush=True)


if __name__ == "__main__":
    main()
