"""Per tenant, guarantee kept and the wide (multi-node) jobs' wait, for one seed and some
`fair` variants (session 17).

    PYTHONPATH=src python3 bench/results/burst/session17/diag_tenants.py SEED GAP base 'gc:...'
"""

import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, "bench")

from trace_compare import config_overrides  # noqa: E402

from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import Simulator  # noqa: E402
from gpupool.sim.metrics import compute_metrics  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402


def one(seed: int, gap: float, variant: str) -> str:
    name, _, sets = variant.partition(":")
    scen = trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if sets:
        scen.config = dataclasses.replace(scen.config, **config_overrides(sets.split(";")))
    sim = Simulator(scen)
    pre: dict[str, int] = {}
    orig = sim._preempt

    def count(wid, reason, t):
        w = sim.running[wid].workload
        k = f"{w.tenant}{'*' if w.request.nodes > 1 else ''}"
        pre[k] = pre.get(k, 0) + 1
        return orig(wid, reason, t)

    sim._preempt = count
    r = sim.run()
    m = compute_metrics(r)
    out = [f"{name} seed {seed} gap {gap:g}: avg wait {m['avg_wait']:.0f} s"]
    for t, v in sorted(m["per_tenant"].items()):
        wide = [
            x for x in r.records.values() if x.workload.tenant == t and x.workload.request.nodes > 1
        ]
        waits = [
            ((x.first_start or r.last_end or 0.0) - x.workload.submitted_at) / 3600 for x in wide
        ]
        out.append(
            f"  {t}: g {r.guarantees[t] // 1000:4d} kept {v['guarantee_kept']} "
            f"preempted {pre.get(t, 0)} (wide {pre.get(t + '*', 0)}) "
            f"wide {len(wide)} first-start waits h {', '.join(f'{x:.1f}' for x in waits)}"
        )
    return "\n".join(out)


if __name__ == "__main__":
    seed, gap = int(sys.argv[1]), float(sys.argv[2])
    variants = sys.argv[3:]
    with ProcessPoolExecutor(2) as p:
        for o in p.map(one, [seed] * len(variants), [gap] * len(variants), variants):
            print(o, flush=True)
