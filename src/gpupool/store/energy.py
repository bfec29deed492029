"""Energy per workload and UTC day (chargeback, issue 35): joules from the GPUs' energy
counters (NVML/DCGM, `GPUSnapshot.energy_mj`), apportioned to the holders of each GPU by
their share (gpupool.server.loops.energy), and the GPU-seconds over which it was measured."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Float, Integer, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpupool.store.daily import day_row, within
from gpupool.store.rows import Base


class EnergyRow(Base):
    __tablename__ = "usage_energy"
    __table_args__ = (UniqueConstraint("workload_id", "day", name="uq_usage_energy_workload_day"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[str] = mapped_column(String(32), index=True)
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    user: Mapped[str] = mapped_column(String(128))
    day: Mapped[str] = mapped_column(String(10), index=True)
    joules: Mapped[float] = mapped_column(Float, default=0.0)
    #: GPU-seconds (by share) the counters covered for this workload and day
    gpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class EnergyRepo:
    def __init__(self, s: Session):
        self.s = s

    def add(
        self,
        *,
        workload_id: str,
        tenant: str,
        user: str,
        day: str,
        joules: float,
        gpu_seconds: float,
    ) -> None:
        """Add to the (workload, day) row, creating it when missing."""
        row = day_row(
            self.s,
            EnergyRow,
            workload_id=workload_id,
            tenant=tenant,
            user=user,
            day=day,
            joules=0.0,
            gpu_seconds=0.0,
        )
        row.joules += joules
        row.gpu_seconds += gpu_seconds
        self.s.flush()

    def rows(
        self,
        *,
        from_day: str | None = None,
        to_day: str | None = None,
        tenants: Iterable[str] | None = None,
        user: str | None = None,
    ) -> list[tuple[str, str, str, float]]:
        """(workload id, tenant, user, joules) over days in [from_day, to_day]."""
        kept = within(EnergyRow, from_day=from_day, to_day=to_day, tenants=tenants, user=user)
        q = select(EnergyRow.workload_id, EnergyRow.tenant, EnergyRow.user, EnergyRow.joules)
        q = q.where(*kept)
        return [
            (w, t, u, float(j or 0.0)) for w, t, u, j in self.s.execute(q.order_by(EnergyRow.id))
        ]
