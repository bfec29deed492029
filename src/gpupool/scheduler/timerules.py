"""The scheduler's inputs about time: GPU-hour budgets (with what was used this period) and
advance reservations. The caller (server loop, simulator) builds a `TimeRules` each cycle;
`gpupool.scheduler.timed.cycle_timed` applies it around `cycle()`.

The same rules, read as plain facts for a forecast (gpupool.scheduler.forecast runs the
scheduler forward):

* `held_capacity(rules, nodes)`: "GPUs G are held back for reservation R from T1 to T2"
  (before T1 only work that ends by T1, or may be stopped, may use them; from T1 to T2 only
  R's holders, and lent preemptible work);
* `held_tenants(rules)`: "tenant T's new work (on model M) is held until T (the budget
  resets)" for `hold` budgets, and "borrows only until T" for `borrow-only` ones.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain import Node
from gpupool.domain.budgets import Budget, BudgetMode, PeriodBounds
from gpupool.domain.reservations import Reservation
from gpupool.scheduler.advance import assign


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A budget and where its tenant stands in the current period."""

    budget: Budget
    #: GPU-hours allocated to the tenant's subtree this period (on the budget's model)
    used_gpu_hours: float
    period: PeriodBounds

    @property
    def over(self) -> bool:
        return self.used_gpu_hours >= self.budget.gpu_hours

    @property
    def resets_at(self) -> float:
        return self.period.end


@dataclass(frozen=True, slots=True)
class TimeRules:
    budgets: tuple[BudgetState, ...] = ()
    reservations: tuple[Reservation, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reservations) or any(
            b.over and b.budget.mode is not BudgetMode.WARN for b in self.budgets
        )


@dataclass(frozen=True, slots=True)
class HeldCapacity:
    """GPUs held back for reservation `reservation` from `start` to `end`."""

    reservation: str
    tenant: str
    users: tuple[str, ...]
    model: str | None
    #: (node, GPU index) of the GPUs it keeps (fewer than booked when the pool lacks them)
    gpus: tuple[tuple[str, int], ...]
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class HeldTenant:
    """Tenant `tenant`'s new work (on `model`; None: any) is held (`hold`) or only borrows
    (`borrow-only`) until `until`, when its budget resets."""

    tenant: str
    model: str | None
    mode: BudgetMode
    until: float


def held_capacity(rules: TimeRules, nodes: tuple[Node, ...], now: float) -> list[HeldCapacity]:
    """The reservations not yet over at `now`, with the GPUs each keeps."""
    live = [r for r in rules.reservations if r.end > now]
    got = assign(live, nodes)
    return [
        HeldCapacity(r.id, r.tenant, r.users, r.model, got.get(r.id, ()), r.start, r.end)
        for r in sorted(live, key=lambda r: (r.start, r.id))
    ]


def held_tenants(rules: TimeRules) -> list[HeldTenant]:
    """The tenants over a `hold` or `borrow-only` budget, and until when."""
    return [
        HeldTenant(b.budget.tenant, b.budget.model, b.budget.mode, b.resets_at)
        for b in rules.budgets
        if b.over and b.budget.mode is not BudgetMode.WARN
    ]
