"""GPU-hour budgets: admins set them, tenant-admins read them; the scheduler loop reads
them each cycle (`time_rules`) and announces a spent budget once per period (`announce`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from gpupool.api.budgets import BudgetIn, BudgetOut
from gpupool.domain import Event, ValidationError
from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod
from gpupool.domain.tenancy import in_subtree
from gpupool.scheduler.budgets import spent_text
from gpupool.scheduler.timerules import BudgetState, TimeRules, held_tenants
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.sim.forecast import CapacityHold
from gpupool.store import BudgetRepo, EventRepo, NotFound, ReservationRepo, TenantRepo


def budget_out(bid: int, st: BudgetState) -> BudgetOut:
    b = st.budget
    return BudgetOut(
        id=bid,
        tenant=b.tenant,
        period=str(b.period),  # type: ignore[arg-type]
        model=b.model,
        gpu_hours=b.gpu_hours,
        mode=str(b.mode),  # type: ignore[arg-type]
        used_gpu_hours=round(st.used_gpu_hours, 6),
        period_label=st.period.label,
        period_start=st.period.start,
        resets_at=st.resets_at,
        over=st.over,
    )


def list_budgets(ctx: AppContext, p: Principal, tenant: str | None) -> list[BudgetOut]:
    """Admins see every budget; tenant-admins those of their subtrees."""
    roots = p.managed_roots()
    if tenant is not None:
        p.require_manage(tenant, "read its budgets")
        roots = [tenant]
    now = ctx.clock.now()
    with ctx.store.read() as s:
        return [budget_out(i, st) for i, st in BudgetRepo(s).states(now, roots)]


def put_budget(ctx: AppContext, p: Principal, body: BudgetIn) -> BudgetOut:
    p.require_admin("set budgets")
    b = Budget(
        body.tenant, BudgetPeriod(body.period), body.gpu_hours, BudgetMode(body.mode), body.model
    )
    now = ctx.clock.now()
    with ctx.store.write() as s:
        try:
            TenantRepo(s).get(b.tenant)
        except NotFound:
            raise ValidationError(
                f"unknown tenant {b.tenant!r}; see `gpupool tenant ls`", "tenant"
            ) from None
        bid = BudgetRepo(s).put(b)
        EventRepo(s).add(
            Event(
                now,
                "budget.set",
                f"{p.name} set a {b.period}ly budget of {b.gpu_hours:g} GPU-hours"
                f"{' on ' + b.model if b.model else ''} (mode {b.mode}) for {b.tenant}",
                tenant=b.tenant,
                user=p.name,
            )
        )
        (_, st), *_ = [x for x in BudgetRepo(s).states(now, [b.tenant]) if x[0] == bid]
    ctx.wake_scheduler()
    return budget_out(bid, st)


def delete_budget(ctx: AppContext, p: Principal, budget_id: int) -> None:
    p.require_admin("remove budgets")
    with ctx.store.write() as s:
        b = BudgetRepo(s).delete(budget_id)
        EventRepo(s).add(
            Event(
                ctx.clock.now(),
                "budget.removed",
                f"{p.name} removed the {b.period}ly budget of {b.tenant}",
                tenant=b.tenant,
                user=p.name,
            )
        )
    ctx.wake_scheduler()


def time_rules(s: Session, now: float) -> tuple[TimeRules, list[tuple[int, BudgetState]]]:
    """The scheduler's time rules now: every budget where it stands, and the reservations
    not yet over (all read from the store: a restart loses nothing)."""
    states = BudgetRepo(s).states(now)
    live = ReservationRepo(s).list(after=now)
    return TimeRules(tuple(st for _, st in states), tuple(live)), states


def announce(s: Session, states: list[tuple[int, BudgetState]], now: float) -> list[Event]:
    """Record a `budget.spent` event for each budget spent in its current period that was not
    announced for that period yet (the period's label is stored: once, across restarts)."""
    repo = BudgetRepo(s)
    out = []
    for bid, st in states:
        if not st.over or repo.warned(bid) == st.period.label:
            continue
        b = st.budget
        then = {
            BudgetMode.WARN: "its work runs as before",
            BudgetMode.BORROW_ONLY: "its new work runs only on idle GPUs and is preempted first",
            BudgetMode.HOLD: "its new work waits",
        }[b.mode]
        e = Event(
            now,
            "budget.spent",
            f"{spent_text(st)} (mode {b.mode}): {then} until the budget resets",
            tenant=b.tenant,
            data={
                "budget": bid,
                "period": st.period.label,
                "used_gpu_hours": st.used_gpu_hours,
                "gpu_hours": b.gpu_hours,
                "mode": str(b.mode),
                "resets_at": st.resets_at,
            },
        )
        EventRepo(s).add(e)
        repo.set_warned(bid, st.period.label)
        out.append(e)
    return out


def webhook_payload(e: Event) -> dict[str, Any]:
    """The JSON the budget webhook receives for a `budget.spent` event: `kind`, `at` (epoch
    seconds) and ISO 8601 `time`, `tenant`, `message`, and the event's data (`budget` id,
    `period`, `used_gpu_hours`, `gpu_hours`, `mode`, `resets_at`)."""
    return {
        "kind": e.kind,
        "at": e.at,
        "time": datetime.fromtimestamp(e.at, UTC).isoformat(),
        "tenant": e.tenant,
        "message": e.message,
        **dict(e.data),
    }


def forecast_tenant_holds(ctx: AppContext) -> Callable[[float], dict[str, float]]:
    """For the forecast loop: leaf tenant -> when its pending work may start again, for the
    tenants under a whole-tenant budget on `hold` that is spent (when it resets). A hold on
    one GPU model, and `borrow-only`, are not holds of the whole tenant: left out."""

    def holds(now: float) -> dict[str, float]:
        with ctx.store.read() as s:
            rules, _ = time_rules(s, now)
            tree = TenantRepo(s).tree()
        out: dict[str, float] = {}
        for h in held_tenants(rules):
            if h.mode is BudgetMode.HOLD and h.model is None:
                for leaf in tree.leaves():
                    if in_subtree(leaf, h.tenant):
                        out[leaf] = max(out.get(leaf, 0.0), h.until)
        return out

    return holds


def forecast_capacity_holds(ctx: AppContext) -> Callable[[float], list[CapacityHold]]:
    """For the forecast loop: the advance reservations not yet over, as capacity held for
    their tenant over their window."""

    def holds(now: float) -> list[CapacityHold]:
        with ctx.store.read() as s:
            live = ReservationRepo(s).list(after=now)
        return [CapacityHold(r.tenant, r.start, r.end, r.gpus, r.model) for r in live]

    return holds
