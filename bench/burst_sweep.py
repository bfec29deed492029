"""Sweep SchedulerConfig variants of `fair` on the synthetic burst workload (issue 32).

    python bench/burst_sweep.py --seeds 1,2,3 --gap 60 --jobs 16 \\
        'base' 'levels:service_levels_s=180,1800,18000,180000'

Each variant is NAME or NAME:KEY=VALUE;KEY=VALUE (SchedulerConfig fields, as
`trace_compare.py --set`, and `window=none|N`: the replay's pending window, none = every
waiting workload passed to each cycle, as the server does); a NAME starting with `fifo` runs
the `fifo` policy; `fifo` is always run. Prints per variant the geometric mean over
seeds of avg wait ÷ fifo's, the lowest guarantee kept (then each seed's lowest),
preemptions, GPU-hours lost and the wide (multi-node) jobs' average wait in hours (mean over
seeds).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_compare import config_overrides, lost_gpu_hours, wide_metrics  # noqa: E402

from gpupool.scheduler.types import Policy  # noqa: E402
from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import simulate  # noqa: E402
from gpupool.sim.metrics import compute_metrics  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402


def one(variant: str, seed: int, gap: float, load: float) -> tuple[str, int, dict]:
    name, _, sets = variant.partition(":")
    policy = Policy.FIFO if name.startswith("fifo") else Policy.FAIR
    scen = trace_scenario(burst_jobs(seed), policy=policy, load=load, checkpointing=True)
    scen.min_cycle_gap_s = gap
    pairs = [p for p in sets.split(";") if p and not p.startswith("window=")]
    for p in sets.split(";"):
        if p.startswith("window="):
            w = p.partition("=")[2]
            scen.pending_window = None if w == "none" else int(w)
    if pairs:
        scen.config = dataclasses.replace(scen.config, **config_overrides(pairs))
    r = simulate(scen)
    m = compute_metrics(r)
    kept = [v["guarantee_kept"] for v in m["per_tenant"].values() if v["guarantee_kept"]]
    return (
        name,
        seed,
        {
            "wait": m["avg_wait"],
            "kept": min(kept),
            "pre": m["preemptions"],
            "lost": lost_gpu_hours(r),
            "wide_wait": wide_metrics(r)["wide"]["avg_wait"] or 0.0,
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="*", default=["base"])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--gap", type=float, default=60.0)
    ap.add_argument("--load", type=float, default=1.2)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    variants = ["fifo", *a.variants]
    args = [(v, s, a.gap, a.load) for v in variants for s in seeds]
    with ProcessPoolExecutor(a.jobs) as pool:
        res = list(pool.map(one, *zip(*args, strict=True)))
    by = {(n, s): m for n, s, m in res}
    for v in variants:
        n = v.partition(":")[0]
        ratios = [by[(n, s)]["wait"] / by[("fifo", s)]["wait"] for s in seeds]
        kept = [by[(n, s)]["kept"] for s in seeds]
        print(
            f"{v}: wait/fifo {statistics.geometric_mean(ratios):.3f} "
            f"({', '.join(f'{x:.2f}' for x in ratios)}), kept "
            f"{min(kept):.3f} ({', '.join(f'{x:.3f}' for x in kept)}), preemptions "
            f"{sum(by[(n, s)]['pre'] for s in seeds)}, lost GPU-h "
            f"{sum(by[(n, s)]['lost'] for s in seeds):.0f}, wide wait h "
            f"{statistics.mean(by[(n, s)]['wide_wait'] for s in seeds) / 3600:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
