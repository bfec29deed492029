"""GPU-hour budgets per tenant and period, and the UTC calendar periods they count over.

A budget caps the GPU-hours a tenant's subtree is *allocated* in one UTC calendar month or
quarter (optionally only on one GPU model). What happens past it is its `mode`:

* `warn`: nothing changes for the work; an event, a metric and the dashboard say so;
* `borrow-only`: the tenant's new work runs only on idle GPUs (as if it had no guarantee:
  it reclaims nothing) and its running work is preempted first (lowest priority);
* `hold`: the tenant's pending work waits until the budget resets (the next period).

GPU-hours count what was allocated (`gpupool.server.loops.accounting`): a whole GPU for an
hour is 1, a fraction its share (0.5 for half a GPU), a MIG instance its compute slices of 7
(a 1g.10gb instance for an hour is 1/7). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from gpupool.domain.errors import ValidationError


class BudgetPeriod(StrEnum):
    MONTH = "month"
    QUARTER = "quarter"


class BudgetMode(StrEnum):
    WARN = "warn"
    BORROW_ONLY = "borrow-only"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `gpu_hours` allocated to `tenant`'s subtree per `period` (on `model` only,
    when set); `mode` says what happens beyond it."""

    tenant: str
    period: BudgetPeriod
    gpu_hours: float
    mode: BudgetMode = BudgetMode.WARN
    model: str | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.gpu_hours) or self.gpu_hours < 0:
            raise ValidationError(
                f"a budget is GPU-hours >= 0, got {self.gpu_hours}; use 0 to allow nothing "
                "or remove the budget to allow any amount",
                "gpu_hours",
            )
        object.__setattr__(self, "period", BudgetPeriod(self.period))
        object.__setattr__(self, "mode", BudgetMode(self.mode))
        if self.model == "":
            object.__setattr__(self, "model", None)


@dataclass(frozen=True, slots=True)
class PeriodBounds:
    """One UTC calendar period: [start, end) in epoch seconds, and its label."""

    start: float
    end: float
    label: str  # "2026-11" or "2026-Q4"

    @property
    def first_day(self) -> str:
        return datetime.fromtimestamp(self.start, UTC).strftime("%Y-%m-%d")

    @property
    def last_day(self) -> str:
        return datetime.fromtimestamp(self.end - 1, UTC).strftime("%Y-%m-%d")


def period_bounds(period: BudgetPeriod | str, now: float) -> PeriodBounds:
    """The UTC calendar month or quarter that holds `now`: from its first day 00:00 UTC to
    the next period's first day 00:00 UTC (quarters start in January, April, July and
    October)."""
    d = datetime.fromtimestamp(now, UTC)
    if BudgetPeriod(period) is BudgetPeriod.MONTH:
        m0, months, label = d.month, 1, f"{d.year}-{d.month:02d}"
    else:
        q = (d.month - 1) // 3
        m0, months, label = 3 * q + 1, 3, f"{d.year}-Q{q + 1}"
    start = datetime(d.year, m0, 1, tzinfo=UTC)
    m1 = m0 + months
    end = datetime(d.year + (m1 - 1) // 12, (m1 - 1) % 12 + 1, 1, tzinfo=UTC)
    return PeriodBounds(start.timestamp(), end.timestamp(), label)


def utc_text(t: float) -> str:
    """'2026-12-01 00:00 UTC'."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")
