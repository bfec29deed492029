"""GPU-hour budgets (gpupool.domain.budgets): rows and repository.

One row per (tenant, period, model; '' for every model). `warned` is the label of the last
period for which the spent budget was announced (event, webhook): a restart announces
nothing twice.
"""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Integer, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod, period_bounds
from gpupool.scheduler.timerules import BudgetState
from gpupool.store.chargeback import ChargebackRepo
from gpupool.store.errors import NotFound
from gpupool.store.rows import Base
from gpupool.store.scoping import in_subtrees


class BudgetRow(Base):
    __tablename__ = "budgets"
    __table_args__ = (
        UniqueConstraint("tenant", "period", "model", name="uq_budgets_tenant_period_model"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name", ondelete="CASCADE"), index=True)
    period: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(128), default="")
    gpu_hours: Mapped[float] = mapped_column(Float)
    mode: Mapped[str] = mapped_column(String(16))
    warned: Mapped[str | None] = mapped_column(String(16))


def budget_of(r: BudgetRow) -> Budget:
    return Budget(
        r.tenant, BudgetPeriod(r.period), r.gpu_hours, BudgetMode(r.mode), r.model or None
    )


class BudgetRepo:
    def __init__(self, s: Session):
        self.s = s

    def list(self, tenants: list[str] | None = None) -> list[tuple[int, Budget]]:
        """(id, budget), by tenant, period and model; `tenants` keeps those subtrees."""
        q = select(BudgetRow).order_by(BudgetRow.tenant, BudgetRow.period, BudgetRow.model)
        if tenants is not None:
            q = q.where(in_subtrees(BudgetRow.tenant, tenants))
        return [(r.id, budget_of(r)) for r in self.s.scalars(q)]

    def get(self, budget_id: int) -> tuple[int, Budget]:
        r = self.s.get(BudgetRow, budget_id)
        if r is None:
            raise NotFound(f"no budget {budget_id}; see `gpupool tenant budget ls`")
        return r.id, budget_of(r)

    def put(self, b: Budget) -> int:
        """Create or replace the budget of (tenant, period, model); its id."""
        r = self.s.scalar(
            select(BudgetRow).where(
                BudgetRow.tenant == b.tenant,
                BudgetRow.period == str(b.period),
                BudgetRow.model == (b.model or ""),
            )
        )
        if r is None:
            r = BudgetRow(tenant=b.tenant, period=str(b.period), model=b.model or "")
            self.s.add(r)
        r.gpu_hours = b.gpu_hours
        r.mode = str(b.mode)
        self.s.flush()
        return r.id

    def delete(self, budget_id: int) -> Budget:
        r = self.s.get(BudgetRow, budget_id)
        if r is None:
            raise NotFound(f"no budget {budget_id}; see `gpupool tenant budget ls`")
        b = budget_of(r)
        self.s.delete(r)
        return b

    def warned(self, budget_id: int) -> str | None:
        r = self.s.get(BudgetRow, budget_id)
        return None if r is None else r.warned

    def set_warned(self, budget_id: int, label: str) -> None:
        r = self.s.get(BudgetRow, budget_id)
        if r is not None:
            r.warned = label

    def states(self, now: float, tenants: list[str] | None = None) -> list[tuple[int, BudgetState]]:
        """(id, where each budget stands in the period holding `now`): the GPU-hours the
        accounting rows hold for its tenant's subtree (on its model) in that period."""
        usage = ChargebackRepo(self.s)
        out = []
        for bid, b in self.list(tenants):
            p = period_bounds(b.period, now)
            used = usage.used_gpu_seconds(b.tenant, p.first_day, p.last_day, b.model) / 3600
            out.append((bid, BudgetState(b, used, p)))
        return out
