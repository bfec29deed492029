"""GPU-hour budgets in a scenario file (`budgets:`, docs/scenarios.md): parsed and checked the
way the API checks them, then metered by the simulator on its virtual clock and passed to
the same pure code as the server (gpupool.scheduler.timed) each cycle.

Scenario seconds are epoch seconds for the calendar: t=0 is 1970-01-01 00:00 UTC, so the
first month ends at t=2,678,400 (31 days) and the first quarter at t=7,776,000 (90 days).
Usage counts what was allocated, as the server's accounting does: a share of a GPU for an
hour counts its share (milli / 1000), on the model of the GPUs the workload holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain import Allocation, DomainError, Node, TenantTree, Workload
from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod, PeriodBounds, period_bounds
from gpupool.domain.tenancy import in_subtree
from gpupool.scheduler.timerules import BudgetState
from gpupool.sim.scenario_errors import ScenarioError


class BudgetSpec(BaseModel):
    """At most `gpu_hours` allocated to `tenant`'s subtree per calendar `period` (on
    `gpu_model` only, when set); `mode` says what happens beyond it (gpupool.domain.budgets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1)
    gpu_hours: float = Field(ge=0, le=1e12)
    period: Literal["month", "quarter"] = "month"
    mode: Literal["warn", "borrow-only", "hold"] = "warn"
    gpu_model: str | None = None


def build_budgets(specs: Sequence[BudgetSpec], tenants: TenantTree) -> tuple[Budget, ...]:
    """The budgets, or ScenarioError listing every problem (one line each): an unknown
    tenant, or two budgets for one (tenant, period, gpu_model)."""
    problems: list[str] = []
    out: list[Budget] = []
    seen: set[tuple[str, str, str | None]] = set()
    names = {t.name for t in tenants}
    for i, s in enumerate(specs):
        where = f"budgets[{i}] (tenant {s.tenant})"
        if s.tenant not in names:
            problems.append(f"{where}: unknown tenant {s.tenant!r}; name one of tenants[]")
            continue
        try:
            period, mode = BudgetPeriod(s.period), BudgetMode(s.mode)
            b = Budget(s.tenant, period, s.gpu_hours, mode, s.gpu_model)
        except DomainError as e:
            problems.append(f"{where}: {e}")
            continue
        key = (b.tenant, str(b.period), b.model)
        if key in seen:
            problems.append(
                f"{where}: a second {b.period}ly budget for {b.tenant}"
                f"{' on ' + b.model if b.model else ''}; keep one"
            )
            continue
        seen.add(key)
        out.append(b)
    if problems:
        raise ScenarioError(problems)
    return tuple(out)


class BudgetMeter:
    """GPU-hours allocated per budget in its current period, integrated on the replay's
    clock (`advance`), and the budgets' states for a cycle (`states`)."""

    def __init__(self, budgets: Sequence[Budget], nodes: Sequence[Node], start: float):
        self.budgets = tuple(budgets)
        self.model_of = {(n.name, g.index): g.model for n in nodes for g in n.gpus}
        #: milli-GPU held now by the work each budget counts
        self.milli = [0] * len(self.budgets)
        self.used_s = [0.0] * len(self.budgets)  # milli-GPU-seconds this period
        self.period: list[PeriodBounds] = [period_bounds(b.period, start) for b in self.budgets]
        self.t = start

    def _counted(self, b: Budget, w: Workload, alloc: Allocation) -> int:
        if not in_subtree(w.tenant, b.tenant) or not alloc.shares:
            return 0
        if b.model is not None:
            sh = alloc.shares[0]
            if self.model_of.get((sh.node, sh.gpu_index)) != b.model:
                return 0
        return alloc.gpu_milli

    def take(self, w: Workload, alloc: Allocation, sign: int) -> None:
        """`w` started (1) or stopped (-1) holding `alloc` (call after `advance`)."""
        for i, b in enumerate(self.budgets):
            self.milli[i] += sign * self._counted(b, w, alloc)

    def advance(self, t: float) -> None:
        """Integrate usage up to `t`; a period that ends on the way starts the next at 0."""
        for i, b in enumerate(self.budgets):
            at = self.t
            while at < t:
                p = self.period[i]
                end = min(t, p.end)
                self.used_s[i] += self.milli[i] * (end - at)
                at = end
                if at >= p.end:
                    self.period[i] = period_bounds(b.period, p.end)
                    self.used_s[i] = 0.0
        self.t = max(self.t, t)

    def states(self) -> tuple[BudgetState, ...]:
        """Where each budget stands now (at the last `advance`)."""
        return tuple(
            BudgetState(b, self.used_s[i] / 3_600_000.0, self.period[i])
            for i, b in enumerate(self.budgets)
        )

    def in_force(self) -> bool:
        """Some `hold` or `borrow-only` budget is spent now."""
        return any(s.over and s.budget.mode is not BudgetMode.WARN for s in self.states())

    def wakeup(self, t: float) -> float | None:
        """The next time a `hold` or `borrow-only` budget changes what a cycle sees: it resets
        (its period ends) while spent, or it becomes spent at the current rate; None if none."""
        nxt = math.inf
        for i, b in enumerate(self.budgets):
            if b.mode is BudgetMode.WARN or b.gpu_hours == 0:
                continue  # a budget of 0 is spent in every period: no change to wake for
            left_s = b.gpu_hours * 3_600_000.0 - self.used_s[i]
            if left_s <= 0:
                nxt = min(nxt, self.period[i].end)
            elif self.milli[i] > 0:
                nxt = min(nxt, math.ceil(t + left_s / self.milli[i] + 1e-6), self.period[i].end)
        return None if nxt == math.inf or nxt <= t else nxt
