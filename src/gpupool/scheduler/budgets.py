"""GPU-hour budgets in a cycle (gpupool.domain.budgets says what each mode means).

`apply_budgets` turns the budgets that are spent into what the cycle sees:

* `hold`: the tenant's pending GPU work (on the budget's model, when it names one) is taken
  out of the cycle and waits with a reason that says when the budget resets;
* `borrow-only`: the tenant's subtree has no guarantee of its own in this cycle (on the
  budget's model: that model's guarantee is dropped), so its new work takes only idle GPUs
  and never reclaims, and all of its running work counts as borrowed and is reclaimable; that
  work also gets the lowest priority, so reclaim picks it first. A parent's guarantee that
  still has room covers it as before (the budget is the subtree's, not the parent's).
* `warn`: nothing here (the server records an event and a metric).

A per-model budget holds the work that asks for that model; work that names no model is
counted (where it ran) but not held by it. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpupool.domain import Quota, Tenant, TenantTree, Workload
from gpupool.domain.budgets import BudgetMode, utc_text
from gpupool.domain.tenancy import in_subtree
from gpupool.scheduler.timerules import BudgetState
from gpupool.scheduler.types import RunningWorkload, Snapshot

#: the priority given to running work of a tenant over a `borrow-only` budget
LAST_PRIORITY = -(2**31)


@dataclass
class BudgetEffects:
    snapshot: Snapshot
    pending: list[Workload]
    #: pending workload id -> why it is held (out of the cycle)
    held: dict[str, str] = field(default_factory=dict)
    #: pending workload id -> text added to its reason (borrow-only)
    notes: dict[str, str] = field(default_factory=dict)


def _gpu_hours(h: float) -> str:
    return f"{h:.1f}".rstrip("0").rstrip(".")


def spent_text(b: BudgetState) -> str:
    """ "tenant 'x' used 120 of its 100 GPU-hours (A100) for 2026-11"."""
    on = f" on {b.budget.model}" if b.budget.model else ""
    return (
        f"tenant '{b.budget.tenant}' used {_gpu_hours(b.used_gpu_hours)} of its "
        f"{_gpu_hours(b.budget.gpu_hours)} GPU-hours{on} for {b.period.label}"
    )


def hold_text(b: BudgetState) -> str:
    return (
        f"over budget: {spent_text(b)} (mode hold); new work waits until the budget "
        f"resets at {utc_text(b.resets_at)}"
    )


def borrow_text(b: BudgetState) -> str:
    return (
        f"; over budget: {spent_text(b)} (mode borrow-only): runs only on idle GPUs and is "
        f"preempted first until {utc_text(b.resets_at)}"
    )


def _applies(b: BudgetState, w: Workload) -> bool:
    return (
        in_subtree(w.tenant, b.budget.tenant)
        and w.request.wants_gpu
        and (b.budget.model is None or w.request.gpu_model == b.budget.model)
    )


def _no_guarantee(t: Tenant, model: str | None) -> Tenant:
    q = t.quota
    if model is None:
        by_model: dict[str, int] = {}
        g = 0
    else:
        by_model = {m: v for m, v in q.guaranteed_by_model.items() if m != model}
        g = q.guaranteed_milli - q.guaranteed_by_model.get(model, 0)
    quota = Quota(
        guaranteed_milli=g,
        limit_milli=q.limit_milli,
        weight=q.weight,
        max_milli_per_user=q.max_milli_per_user,
        guaranteed_by_model=MappingProxyType(by_model),
    )
    return dataclasses.replace(t, quota=quota)


def apply_budgets(
    states: Sequence[BudgetState], snap: Snapshot, pending: Sequence[Workload]
) -> BudgetEffects:
    """The snapshot and pending work the cycle sees under the spent budgets `states`."""
    spent = [b for b in states if b.over and b.budget.mode is not BudgetMode.WARN]
    out = BudgetEffects(snap, list(pending))
    if not spent:
        return out
    held = out.held
    for b in spent:
        if b.budget.mode is BudgetMode.HOLD:
            for w in pending:
                if w.id not in held and _applies(b, w):
                    held[w.id] = hold_text(b)
    borrow = [b for b in spent if b.budget.mode is BudgetMode.BORROW_ONLY]
    if held:
        out.pending = [w for w in pending if w.id not in held]
    if not borrow:
        return out
    for w in out.pending:
        for b in borrow:
            if _applies(b, w):
                out.notes[w.id] = borrow_text(b)
                break
    tenants = []
    for t in snap.tenants:
        for b in borrow:
            if in_subtree(t.name, b.budget.tenant):
                t = _no_guarantee(t, b.budget.model)
        tenants.append(t)
    running: list[RunningWorkload] = []
    for rw in snap.running:
        w = rw.workload
        if any(_on_model(b, rw) and in_subtree(w.tenant, b.budget.tenant) for b in borrow):
            rw = dataclasses.replace(rw, workload=dataclasses.replace(w, priority=LAST_PRIORITY))
        running.append(rw)
    out.snapshot = dataclasses.replace(snap, tenants=TenantTree(tenants), running=tuple(running))
    return out


def _on_model(b: BudgetState, rw: RunningWorkload) -> bool:
    m = b.budget.model
    return m is None or rw.workload.request.gpu_model == m
