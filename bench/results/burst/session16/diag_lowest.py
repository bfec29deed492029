"""Per seed: the tenant keeping least of its guarantee, its wide jobs' wait, its preemptions by
reason, the final relative-levels scale (session 16; needs km_levels.diff for relative runs).

    PYTHONPATH=src python3 bench/results/burst/session16/diag_lowest.py 60 "" \
        "service_levels_relative=0.07,0.7,7"
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


def one(seed, gap, sets):
    scen = trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if sets:
        scen.config = dataclasses.replace(scen.config, **config_overrides(sets.split(";")))
    sim = Simulator(scen)
    cnt = collections.Counter()
    orig = sim._preempt

    def pre(wid, reason, t):
        w = sim.running[wid].workload
        cnt[(w.tenant, reason.split(":")[0][:40], w.request.nodes > 1)] += 1
        return orig(wid, reason, t)

    sim._preempt = pre
    r = sim.run()
    m = compute_metrics(r)
    pt = m["per_tenant"]
    low = min((v["guarantee_kept"], t) for t, v in pt.items() if v["guarantee_kept"])
    t = low[1]
    wide = [
        x for x in r.records.values() if x.workload.tenant == t and x.workload.request.nodes > 1
    ]
    ww = (
        sum((x.first_start or 0) - x.workload.submitted_at for x in wide) / max(1, len(wide)) / 3600
    )
    out = (
        f"seed {seed} {sets[:30] or 'base'}: wait {m['avg_wait']:.0f} low {t} {low[0]:.3f} "
        f"(attain {pt[t]['guarantee_attainment']}) wide n={len(wide)} wait {ww:.2f}h; "
    )
    out += " | ".join(f"{k}:{v}" for k, v in sorted(cnt.items()) if k[0] == t)
    rel = getattr(sim, "relative", None)
    out += f"; level sc={rel and rel.scale.scale} ch={rel and rel.scale.changes}"
    return out


if __name__ == "__main__":
    gap = float(sys.argv[1])
    variants = sys.argv[2:]
    args = [(s, gap, v) for v in variants for s in (1, 2, 3, 4, 5)]
    with ProcessPoolExecutor(2) as p:
        for o in p.map(one, *zip(*args, strict=True)):
            print(o, flush=True)
