"""What the time rules (issue 35: budgets, advance reservations) cost a scheduler cycle.

One synthetic pool (`--nodes` x 8 H100, `--tenants` tenants with guarantees, a queue of
`--pending` 1- and 2-GPU jobs, the pool three quarters full) and the same cycle timed, in
one run, alternately: `cycle()` (no rules), `cycle_timed()` with no rules in force, with one
tenant over a `hold` budget, with one over a `borrow-only` budget, and with one reservation
of 16 GPUs (upcoming; active with its GPUs free, the worst case: sub-cycles place work
on them; active with its GPUs all held, the steady state: they are skipped). Each variant
keeps its own `SchedulerCache` across its repetitions, as the server does; the median of
`--reps` is reported, and its ratio to plain `cycle()`.

    python bench/time_rules_cost.py --nodes 500 --pending 5000 --reps 7
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from gpupool.domain import (
    GPU,
    Allocation,
    Node,
    Quota,
    Request,
    Share,
    Tenant,
    TenantTree,
    Workload,
)
from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod, period_bounds
from gpupool.domain.reservations import Reservation
from gpupool.scheduler import RunningWorkload, SchedulerCache, Snapshot, cycle
from gpupool.scheduler.timed import cycle_timed
from gpupool.scheduler.timerules import BudgetState, TimeRules

NOW = 1_780_000_000.0


def pool(n_nodes: int, n_tenants: int, n_pending: int, seed: int = 7):
    rnd = random.Random(seed)
    nodes = tuple(
        Node(
            f"n{i:04d}", tuple(GPU(g, f"n{i}-{g}", "H100", 81920) for g in range(8)), 64000, 512000
        )
        for i in range(n_nodes)
    )
    g = int(n_nodes * 8 * 0.8 / n_tenants)
    tree = TenantTree(Tenant(f"t{i}", Quota.gpus(g, g * 3)) for i in range(n_tenants))
    running = []
    for i, nd in enumerate(nodes[: int(n_nodes * 0.75)]):
        w = Workload(f"r{i}", f"t{i % n_tenants}", "u", Request(gpus=8, cpu_milli=1000))
        shares = tuple(Share(nd.name, x.index, x.uuid, 1000, x.memory_mib) for x in nd.gpus)
        running.append(RunningWorkload(w, Allocation(w.id, nd.name, shares, NOW - 3600)))
    pending = [
        Workload(
            f"p{i}",
            f"t{rnd.randrange(n_tenants)}",
            f"u{rnd.randrange(50)}",
            Request(gpus=rnd.choice((1, 1, 2)), cpu_milli=1000),
            submitted_at=NOW - 1000 + i * 0.01,
        )
        for i in range(n_pending)
    ]
    return Snapshot(nodes, tree, tuple(running)), pending


def timed(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--pending", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    snap, pending = pool(a.nodes, a.tenants, a.pending)
    period = period_bounds(BudgetPeriod.MONTH, NOW)

    def spent(mode: BudgetMode) -> TimeRules:
        return TimeRules((BudgetState(Budget("t0", BudgetPeriod.MONTH, 10, mode), 20, period),))

    def booked(start: float, nodes: tuple[str, ...] = ()) -> TimeRules:
        r = Reservation("r1", "t1", 16, start, start + 7200, nodes=nodes)
        return TimeRules(reservations=(r,))

    variants = {
        "cycle": None,
        "timed, no rules": TimeRules(),
        "hold budget": spent(BudgetMode.HOLD),
        "borrow-only budget": spent(BudgetMode.BORROW_ONLY),
        "reservation, upcoming": booked(NOW + 3600),
        "reservation, active": booked(NOW - 60),
        # its GPUs all held by running work (the steady state): nothing to place on them
        "reservation, GPUs in use": booked(NOW - 60, ("n0000", "n0001")),
    }
    caches = {k: SchedulerCache() for k in variants}
    ms: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(a.reps):  # alternately, so machine noise hits every variant alike
        for k, rules in variants.items():
            c = caches[k]
            if rules is None:
                ms[k].append(timed(lambda c=c: cycle(snap, pending, NOW, cache=c), 1))
            else:
                ms[k].append(
                    timed(lambda c=c, r=rules: cycle_timed(snap, pending, NOW, cache=c, rules=r), 1)
                )
    base = statistics.median(ms["cycle"])
    rows = {
        k: {"p50_ms": statistics.median(v), "ratio": statistics.median(v) / base}
        for k, v in ms.items()
    }
    if a.json:
        print(json.dumps({"nodes": a.nodes, "pending": a.pending, "reps": a.reps, "rows": rows}))
        return
    print(f"{a.nodes} nodes x 8 GPUs, {a.pending} pending, median of {a.reps} (warm cache)")
    for k, r in rows.items():
        print(f"  {k:24} {r['p50_ms']:8.1f} ms   x{r['ratio']:.2f}")


if __name__ == "__main__":
    main()
