"""Per cycle, for each waiting gang within its tenant's guarantee (usage + gang <= guarantee):
how many whole nodes could be freed for a member if one could stop (A) borrowed work of
other tenants (as reclaim), (B) A plus young (< min_runtime_s) borrowed work, (C) B plus the
gang's own tenant's work, (D) any checkpointing work. Counts cycles by which class first
reaches N nodes (session 17).

    PYTHONPATH=src python3 bench/results/burst/session17/diag_gangs.py SEED [GAP]
"""

import collections
import importlib
import re
import sys

from gpupool.sim.burst import burst_jobs
from gpupool.sim.engine import Simulator
from gpupool.sim.trace import trace_scenario


def main(seed: int, gap: float) -> None:
    import gpupool.scheduler.gangreclaim as gr
    import gpupool.scheduler.gangwalk as gw

    calls: dict = {}
    orig_rfg = gw.reclaim_for_gang
    orig_on = gr._reclaim_on

    def rfg(ins, st, pre, w, shape):
        res = orig_rfg(ins, st, pre, w, shape)
        calls.setdefault(w.id, []).append(("rfg", res))
        return res

    def on(st, pre, w, shape, one):
        rc = pre.reclaimer()
        res = orig_on(st, pre, w, shape, one)
        calls.setdefault(w.id, []).append(("on", res, rc.checkpointing_only))
        return res

    gw.reclaim_for_gang = rfg
    gr._reclaim_on = on
    orig_place = gw.place_gang

    def place(ins, st, pre, turn, w, shape):
        calls.setdefault(w.id, []).append(("noreclaim", w.tenant in st.no_reclaim))
        return orig_place(ins, st, pre, turn, w, shape)

    gw.place_gang = place
    cy = importlib.import_module("gpupool.scheduler.cycle")

    cy.place_gang = place
    scen = trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    sim = Simulator(scen)
    orig = sim._run_cycle
    cnt: collections.Counter = collections.Counter()
    gpn = {n.name: len(n.gpus) for n in scen.nodes}
    minrt = scen.config.min_runtime_s

    reasons: collections.Counter = collections.Counter()
    examples = 0
    examples_out = []

    def run_cycle(t):
        todo = []
        g = sim.guarantee
        use = dict(sim.alloc)
        by_node = collections.defaultdict(list)
        for rw in sim.running.values():
            for s in rw.allocation.shares:
                by_node[s.node].append((rw, s.milli))
        for w in list(sim.pending.values()):
            r = w.request
            if r.nodes <= 1:
                continue
            milli = r.total_gpu_milli
            if use.get(w.tenant, 0) + milli > g.get(w.tenant, 0):
                cnt["gang beyond guarantee"] += 1
                continue
            per = milli // r.nodes // 1000
            klass = collections.Counter()
            for name, cap in gpn.items():
                free = cap * 1000 - sum(m for _, m in by_node.get(name, ()))
                adds = {"A": 0, "B": 0, "C": 0, "D": 0}
                for rw, m in by_node.get(name, ()):
                    v = rw.workload
                    young = t - (v.started_at or rw.allocation.since) < minrt
                    borrow = use.get(v.tenant, 0) > g.get(v.tenant, 0)
                    if v.tenant != w.tenant and borrow and not young:
                        adds["A"] += m
                    if v.tenant != w.tenant and borrow:
                        adds["B"] += m
                    if (v.tenant != w.tenant and borrow) or v.tenant == w.tenant:
                        adds["C"] += m
                    if v.checkpointing and v.request.nodes <= 1:
                        adds["D"] += m
                for k in "ABCD":
                    if free + adds[k] >= per * 1000:
                        klass[k] += 1
            first = next((k for k in "ABCD" if klass[k] >= r.nodes), "none")
            cnt[f"within: nodes needed {r.nodes}, first class {first}"] += 1
            todo.append((w.id, first, t - w.submitted_at >= scen.config.reclaim_after_s))
        calls.clear()
        d = orig(t)
        for wid, first, due in todo:
            if first == "A" and due:
                w = sim.records[wid].workload
                same = [
                    (x.id, x.id in calls, calls.get(x.id))
                    for x in sim.pending.values()
                    if x.tenant == w.tenant and x.request == w.request and x.id != wid
                ]
                reasons[("calls", str(calls.get(wid)), str(same)[:200])] += 1
                if calls.get(wid) is None and not same and examples < 3:
                    examples_out.append((t, wid, w.tenant, w.request, d.pending.get(wid), sim.window is not None and w in sim.window.visible(sim.pending) ))
                    examples_out.append(sorted((x.submitted_at, x.id, x.request.nodes, x.request.gpus if hasattr(x.request, "gpus") else None) for x in sim.pending.values() if x.tenant == w.tenant)[:8])
            pi = d.pending.get(wid)
            why = pi.reason if pi is not None else "admitted"
            why = re.sub(r"[0-9.]+", "#", why)[:90]
            reasons[(first, due, why)] += 1
        return d

    sim._run_cycle = run_cycle
    sim.run()
    for k, v in sorted(cnt.items()):
        print(f"{v:6d}  {k}")
    for e in examples_out[:12]:
        print(e)
    for k, v in sorted(reasons.items()):
        print(f"{v:6d}  {k}")


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 60.0)
