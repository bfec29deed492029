"""`cycle_timed`: one cycle under the time rules (budgets and advance reservations), what
the server loop and the simulator call. Without rules in force it is `cycle()` itself.

Budgets first (gpupool.scheduler.budgets: held work leaves the cycle, borrow-only tenants
lose their guarantee), then the reservations (gpupool.scheduler.advance) around the cycle.
Held work gets its reason and a place behind its tenant's other waiting work. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpupool.domain import Workload
from gpupool.scheduler.advance import cycle_with_reservations
from gpupool.scheduler.budgets import apply_budgets
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.cycle import cycle
from gpupool.scheduler.timerules import TimeRules
from gpupool.scheduler.types import Decisions, PendingInfo, SchedulerConfig, Snapshot


def cycle_timed(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    now: float,
    config: SchedulerConfig = SchedulerConfig(),
    cache: SchedulerCache | None = None,
    rules: TimeRules = TimeRules(),
) -> Decisions:
    """`cycle(snapshot, pending, now, config, cache)` under `rules`; same contract (pure,
    deterministic, inputs never mutated)."""
    if not rules:
        return cycle(snapshot, pending, now, config, cache)
    fx = apply_budgets(rules.budgets, snapshot, pending)
    live = [r for r in rules.reservations if r.end > now]
    if live:
        d = cycle_with_reservations(fx.snapshot, fx.pending, now, config, cache, live)
    else:
        d = cycle(fx.snapshot, fx.pending, now, config, cache)
    if not fx.held and not fx.notes:
        return d
    info = dict(d.pending)
    for wid, note in fx.notes.items():
        pi = info.get(wid)
        if pi is not None:
            info[wid] = dataclasses.replace(pi, reason=pi.reason + note)
    if fx.held:
        tenant_of = {w.id: w.tenant for w in pending}
        last: dict[str, int] = {}
        rank: dict[str, int] = {}
        for wid, pi in info.items():
            t = tenant_of.get(wid, "")
            last[t] = max(last.get(t, 0), pi.position)
            rank[t] = pi.tenant_position
        worst = max(rank.values(), default=0)
        for w in sorted(
            (w for w in pending if w.id in fx.held), key=lambda w: (w.submitted_at, w.id)
        ):
            if w.tenant not in rank:
                worst += 1
                rank[w.tenant] = worst
            last[w.tenant] = last.get(w.tenant, 0) + 1
            info[w.id] = PendingInfo(fx.held[w.id], last[w.tenant], rank[w.tenant])
    return dataclasses.replace(d, pending=info)
