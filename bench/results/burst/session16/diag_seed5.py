"""One seed, one tenant, base against km95 at gap 60: shortfall, wide jobs, preemptions by reason,
allocation every 10 minutes (session 16; needs km_levels.diff).

    PYTHONPATH=src python3 bench/results/burst/session16/diag_seed5.py 5 t00
"""

import collections
import dataclasses
import sys

sys.path.insert(0, "bench")
from concurrent.futures import ProcessPoolExecutor

from trace_compare import config_overrides

from gpupool.sim.burst import burst_jobs
from gpupool.sim.engine import Simulator
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.trace import trace_scenario


def cls(r):
    if "reclaims" in r:
        return "reclaimed"
    if "moved" in r:
        return "moved"
    if "attained service" in r:
        return "level"
    return r[:30]


def one(seed, gap, sets, ten):
    scen = trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if sets:
        scen.config = dataclasses.replace(scen.config, **config_overrides(sets.split(";")))
    sim = Simulator(scen, sample_every_s=600)
    cnt = collections.Counter()
    orig = sim._preempt

    def pre(wid, reason, t):
        w = sim.running[wid].workload
        cnt[(w.tenant == ten, cls(reason), w.request.nodes > 1)] += 1
        return orig(wid, reason, t)

    sim._preempt = pre
    r = sim.run()
    m = compute_metrics(r)
    pt = m["per_tenant"][ten]
    tl = r.integrals[ten]
    wide = [
        x for x in r.records.values() if x.workload.tenant == ten and x.workload.request.nodes > 1
    ]
    g = r.guarantees[ten]
    out = [
        f"{sets[:20] or 'base'} s{seed} {ten}: kept {pt['guarantee_kept']} g={g / 1000:.0f}GPU "
        f"fit {tl.owed_fit / 3.6e6:.0f} met {tl.owed_fit_met / 3.6e6:.0f} "
        f"short {(tl.owed_fit - tl.owed_fit_met) / 3.6e6:.0f} GPU-h"
    ]
    out.append(
        "  wide: "
        + ", ".join(
            f"{x.workload.request.total_gpu_milli // 1000}g "
            f"w{((x.first_start or 0) - x.workload.submitted_at) / 3600:.1f}h "
            f"p{x.workload.preemptions}"
            for x in wide
        )
    )
    out.append("  pre: " + str(sorted(cnt.items())))
    # hourly alloc of tenant
    out.append("  alloc/10min: " + " ".join(f"{s[1].get(ten, 0) // 1000}" for s in r.samples[::1]))
    return "\n".join(out)


if __name__ == "__main__":
    seed = int(sys.argv[1])
    ten = sys.argv[2]
    args = [(seed, 60, "", ten), (seed, 60, "service_levels_relative=0.07,0.7,7", ten)]
    with ProcessPoolExecutor(2) as p:
        for o in p.map(one, *zip(*args, strict=True)):
            print(o, flush=True)
