"""When the replay needs a scheduler cycle that no event asks for, and when it may skip one.

A mixin of `gpupool.sim.engine.Simulator` (it reads the simulator's state, changes none):
time alone changes a cycle's outcome only when running work passes `min_runtime_s` (or, for
checkpointing work, a service level) or waiting work passes `reclaim_after_s` — and only
while a reclaim or a service-level preemption is possible at all — or when an advance
reservation's window opens or closes, or a `hold` or `borrow-only` budget is spent or resets,
while work waits. While such a budget is spent no cycle is skipped as futile (its tenant's
guarantee is not what `guarantee` says).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import Any

from gpupool.domain import Workload
from gpupool.sim.budgets import BudgetMeter


class Wakeups:
    """Needs the Simulator's attributes (see gpupool.sim.engine)."""

    leaves: list[str]
    ancestors: dict[str, list[str]]
    alloc: dict[str, int]
    guarantee: dict[str, int]
    pending_count: dict[str, int]
    pending: dict[str, Workload]
    capacity: int
    preempting: bool
    levels: tuple[float, ...]
    ckpt_running: dict[str, int]
    level_heap: list[tuple[float, str, int]]
    min_runtime_heap: list[tuple[float, str, int]]
    reclaim_due_heap: list[tuple[float, str]]
    records: dict[str, Any]
    s: Any
    budgets: BudgetMeter | None

    def _reclaim_possible(self, tenants: Iterable[str] | None = None) -> bool:
        """Some tenant with waiting work (of `tenants`; default all) is below its guarantee
        at some level of the tree while a sibling branch at that level is over its own (holds
        borrowed GPUs a reclaim could take back). Without such a pair no reclaim can happen,
        whatever the time (or a budget is in force: then it may)."""
        if self.budgets is not None and self.budgets.in_force():
            return True
        used: dict[str, int] = {}
        for ten in self.leaves:
            for anc in self.ancestors[ten]:
                used[anc] = used.get(anc, 0) + self.alloc[ten]
        tree = self.s.tenants
        g = self.guarantee
        for ten in self.leaves if tenants is None else tenants:
            if not self.pending_count.get(ten):
                continue
            for anc in self.ancestors.get(ten, ()):
                if used[anc] >= g[anc]:
                    continue
                sibs = tree.children(tree.get(anc).parent)
                if any(s != anc and used.get(s, 0) > g[s] for s in sibs):
                    return True
        return False

    def _futile(self, new_subs: list[Workload]) -> bool:
        """True when a cycle now cannot admit or reclaim anything the last one could not:
        no GPU milli is free, every newcomer wants a GPU, and (when preempting) no newcomer's
        tenant could reclaim (see `_reclaim_possible`)."""
        if sum(self.alloc.values()) < self.capacity:
            return False
        if self.budgets is not None and self.budgets.in_force():
            return False
        if any(not w.request.wants_gpu for w in new_subs):
            return False
        if not self.preempting:
            return True
        tenants = {w.tenant for w in new_subs}
        return not self._reclaim_possible(tenants) and not self._level_possible(tenants)

    def _level_possible(self, tenants: Iterable[str] | None = None) -> bool:
        """Some tenant (of `tenants`; default all) with waiting work has running checkpointing
        work (a possible victim for service levels)."""
        if not self.levels:
            return False
        ck, pc = self.ckpt_running, self.pending_count
        return any(ck.get(t) and pc.get(t) for t in (ck if tenants is None else tenants))

    def _time_wakeup(self, t: float) -> float | None:
        """When time alone could change the next cycle's outcome; None if never."""
        due = self._reclaim_wakeup(t)
        booked = self._booking_wakeup(t)  # issue 35: a reservation's window opens or closes
        spent = self.budgets.wakeup(t) if self.budgets is not None and self.pending else None
        at = [x for x in (due, booked, spent) if x is not None]
        return min(at, default=None)

    def _booking_wakeup(self, t: float) -> float | None:
        """The next start or end of an advance reservation after `t` while work waits (at
        those times capacity is taken or comes back); None if none."""
        if not self.pending or not self.s.reservations:
            return None
        edges = [x for r in self.s.reservations for x in (r.start, r.end) if x > t]
        return min(edges, default=None)

    def _reclaim_wakeup(self, t: float) -> float | None:
        """When a reclaim or a service-level preemption could become possible; None if never."""
        if not self.pending or not self.preempting or not self.s.cycle_interval_s:
            return None
        h = self.min_runtime_heap
        while h and (h[0][0] <= t or self.records[h[0][1]].epoch != h[0][2]):
            heapq.heappop(h)
        d = self.reclaim_due_heap  # waiting work passing reclaim_after_s may now reclaim
        while d and (d[0][0] <= t or d[0][1] not in self.pending):
            heapq.heappop(d)
        nxt = min(h[0][0] if h else math.inf, d[0][0] if d else math.inf)
        if nxt != math.inf and not self._reclaim_possible():
            nxt = math.inf
        lh = self.level_heap  # checkpointing work passing min_runtime_s or a service level
        while lh and (lh[0][0] <= t or self.records[lh[0][1]].epoch != lh[0][2]):
            heapq.heappop(lh)
        if lh and lh[0][0] < nxt and self._level_possible():
            nxt = lh[0][0]
        if nxt == math.inf:
            return None
        step = self.s.cycle_interval_s
        return t + step * max(1, math.ceil((nxt - t) / step))

    # ------------------------------------------------------------------ main loop
