"""Why waiting gangs within their tenant's guarantee do not start (session 17).

Per cycle, for each waiting multi-node workload whose tenant's usage plus the gang stays
within its guarantee (the gangs `guarantee_kept` counts as owed), the first class of work
whose stop would free a member's room on N nodes: A other tenants' borrowed work that has
run `min_runtime_s` (what reclaim may take), B also younger borrowed work, C also the gang's
own tenant's work, D any one-node checkpointing work, none. For the cycles of class A where
the gang had waited `reclaim_after_s`, what the cycle did for it: `noreclaim` (its tenant
was already in `no_reclaim`), `rfg` (reclaim_for_gang's result); and its reason.

    PYTHONPATH=src python3 bench/results/burst/session17/diag_gangs.py SEED [GAP] [SET]
"""

import collections
import dataclasses
import importlib
import re
import sys

sys.path.insert(0, "bench")

from trace_compare import config_overrides  # noqa: E402

import gpupool.scheduler.gangwalk as gw  # noqa: E402
from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import Simulator  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402

cy = importlib.import_module("gpupool.scheduler.cycle")


def main(seed: int, gap: float, sets: str) -> None:
    calls: dict = {}
    orig_rfg, orig_place = gw.reclaim_for_gang, gw.place_gang

    def rfg(ins, st, pre, w, shape):
        res = orig_rfg(ins, st, pre, w, shape)
        calls.setdefault(w.id, []).append(f"rfg={res}")
        return res

    def place(ins, st, pre, turn, w, shape):
        calls.setdefault(w.id, []).append(f"noreclaim={w.tenant in st.no_reclaim}")
        return orig_place(ins, st, pre, turn, w, shape)

    gw.reclaim_for_gang = rfg
    cy.place_gang = place
    scen = trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if sets:
        scen.config = dataclasses.replace(scen.config, **config_overrides(sets.split(";")))
    sim = Simulator(scen)
    orig = sim._run_cycle
    cnt: collections.Counter = collections.Counter()
    outcome: collections.Counter = collections.Counter()
    gpn = {n.name: len(n.gpus) for n in scen.nodes}
    minrt = scen.config.min_runtime_s

    def run_cycle(t):
        g, use = sim.guarantee, dict(sim.alloc)
        by_node = collections.defaultdict(list)
        for rw in sim.running.values():
            for s in rw.allocation.shares:
                by_node[s.node].append((rw, s.milli))
        todo = []
        for w in list(sim.pending.values()):
            r = w.request
            if r.nodes <= 1:
                continue
            if use.get(w.tenant, 0) + r.total_gpu_milli > g.get(w.tenant, 0):
                cnt["gang beyond its guarantee (not owed)"] += 1
                continue
            per = r.total_gpu_milli // r.nodes
            klass: collections.Counter = collections.Counter()
            for name, size in gpn.items():
                free = size * 1000 - sum(m for _, m in by_node.get(name, ()))
                adds = dict.fromkeys("ABCD", 0)
                for rw, m in by_node.get(name, ()):
                    v = rw.workload
                    young = t - (v.started_at or rw.allocation.since) < minrt
                    borrow = v.tenant != w.tenant and use.get(v.tenant, 0) > g.get(v.tenant, 0)
                    adds["A"] += m if borrow and not young else 0
                    adds["B"] += m if borrow else 0
                    adds["C"] += m if borrow or v.tenant == w.tenant else 0
                    adds["D"] += m if v.checkpointing and v.request.nodes <= 1 else 0
                for k in "ABCD":
                    klass[k] += free + adds[k] >= per
            first = next((k for k in "ABCD" if klass[k] >= r.nodes), "none")
            cnt[f"within its guarantee, {r.nodes} nodes: class {first}"] += 1
            todo.append((w.id, first, t - w.submitted_at >= scen.config.reclaim_after_s))
        calls.clear()
        d = orig(t)
        for wid, first, due in todo:
            if first != "A" or not due:
                continue
            pi = d.pending.get(wid)
            why = re.sub(r"[0-9.]+", "#", pi.reason)[:60] if pi is not None else "admitted"
            outcome[(" ".join(calls.get(wid, ["not walked"])), why)] += 1
        return d

    sim._run_cycle = run_cycle
    sim.run()
    print(f"seed {seed}, gap {gap:g} s, {sets or 'base'}: gang-cycles")
    for k, v in sorted(cnt.items()):
        print(f"{v:6d}  {k}")
    print("class A, due: what the cycle did (reason after the cycle)")
    for k, v in sorted(outcome.items(), key=lambda e: -e[1]):
        print(f"{v:6d}  {k}")


if __name__ == "__main__":
    main(
        int(sys.argv[1]),
        float(sys.argv[2]) if len(sys.argv) > 2 else 60.0,
        sys.argv[3] if len(sys.argv) > 3 else "",
    )
