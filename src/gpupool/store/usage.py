"""Repository for usage (accounting): per workload and UTC day, rolled up by queries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.store.daily import day_row, within
from gpupool.store.rows import UsageRow

GroupBy = Literal["user", "tenant", "day", "workload"]


@dataclass(frozen=True, slots=True)
class UsageTotal:
    key: str
    gpu_seconds_allocated: float
    gpu_seconds_busy: float
    gpu_memory_mib_seconds: float
    gpu_memory_mib_max: int
    workloads: int
    #: GPU-seconds for which telemetry gave a busy fraction (0: nothing was measured)
    gpu_seconds_measured: float = 0.0
    #: GPU-seconds whose busy fraction telemetry estimated (MPS shares), not measured
    gpu_seconds_estimated: float = 0.0

    @property
    def busy_known(self) -> bool:
        """Whether telemetry measured or estimated any of this usage (else busy is unknown)."""
        return self.gpu_seconds_measured > 0 or self.gpu_seconds_estimated > 0

    @property
    def efficiency(self) -> float | None:
        """Busy / allocated (None when nothing was allocated or nothing measured/estimated)."""
        if self.gpu_seconds_allocated <= 0 or not self.busy_known:
            return None
        return self.gpu_seconds_busy / self.gpu_seconds_allocated


class UsageRepo:
    def __init__(self, s: Session):
        self.s = s

    def add(
        self,
        *,
        workload_id: str,
        tenant: str,
        user: str,
        day: str,
        gpu_seconds_allocated: float = 0.0,
        gpu_seconds_busy: float = 0.0,
        gpu_memory_mib_seconds: float = 0.0,
        gpu_memory_mib: int = 0,
        gpu_seconds_measured: float | None = None,
        gpu_seconds_estimated: float = 0.0,
    ) -> None:
        """Add to the (workload, day) row, creating it when missing. `gpu_memory_mib` is the
        memory seen now; the row keeps the maximum. `gpu_seconds_measured`: the part of the
        allocated seconds telemetry measured (None: all of them); `gpu_seconds_estimated`:
        the part whose busy fraction it estimated instead (counted in neither twice)."""
        if gpu_seconds_measured is None:
            gpu_seconds_measured = gpu_seconds_allocated
        row = day_row(
            self.s,
            UsageRow,
            workload_id=workload_id,
            tenant=tenant,
            user=user,
            day=day,
            gpu_seconds_allocated=0.0,
            gpu_seconds_busy=0.0,
            gpu_seconds_measured=0.0,
            gpu_seconds_estimated=0.0,
            gpu_memory_mib_seconds=0.0,
            gpu_memory_mib_max=0,
        )
        row.gpu_seconds_allocated += gpu_seconds_allocated
        row.gpu_seconds_busy += gpu_seconds_busy
        row.gpu_seconds_measured += gpu_seconds_measured
        row.gpu_seconds_estimated += gpu_seconds_estimated
        row.gpu_memory_mib_seconds += gpu_memory_mib_seconds
        row.gpu_memory_mib_max = max(row.gpu_memory_mib_max, gpu_memory_mib)
        self.s.flush()

    def rollup(
        self,
        group_by: GroupBy,
        *,
        from_day: str | None = None,
        to_day: str | None = None,
        tenants: Iterable[str] | None = None,
        user: str | None = None,
    ) -> list[UsageTotal]:
        """Totals per `group_by` key over days in [from_day, to_day] (inclusive, YYYY-MM-DD).

        `tenants` keeps rows of those subtrees; `user` keeps one user's rows."""
        col = {
            "user": UsageRow.user,
            "tenant": UsageRow.tenant,
            "day": UsageRow.day,
            "workload": UsageRow.workload_id,
        }[group_by]
        q = select(
            col,
            func.sum(UsageRow.gpu_seconds_allocated),
            func.sum(UsageRow.gpu_seconds_busy),
            func.sum(UsageRow.gpu_memory_mib_seconds),
            func.max(UsageRow.gpu_memory_mib_max),
            func.count(func.distinct(UsageRow.workload_id)),
            func.sum(UsageRow.gpu_seconds_measured),
            func.sum(UsageRow.gpu_seconds_estimated),
        ).group_by(col)
        q = q.where(*within(UsageRow, from_day=from_day, to_day=to_day, tenants=tenants, user=user))
        return [
            UsageTotal(
                str(k),
                float(a or 0),
                float(b or 0),
                float(m or 0),
                int(mx or 0),
                int(n),
                float(z or 0),
                float(e or 0),
            )
            for k, a, b, m, mx, n, z, e in self.s.execute(q.order_by(col))
        ]

    def attained_by_tenant(self) -> dict[str, float]:
        """Milli-GPU-seconds allocated so far per tenant (for the LAS policy)."""
        q = select(UsageRow.tenant, func.sum(UsageRow.gpu_seconds_allocated)).group_by(
            UsageRow.tenant
        )
        return {t: float(v or 0) * 1000 for t, v in self.s.execute(q)}
