"""Chargeback: usage (the accounting rows, `UsageRow`) per tenant, user or GPU model over a
range of UTC days, and the GPU model each workload's usage counts on.

Energy comes from `usage_energy` (gpupool.store.energy), keyed the same way; a key with no
energy recorded has none (None), not zero.

A workload's model is the one it asked for, else the model of the GPUs its latest allocation
held (looked up in `gpus`); "unknown" when neither is known (its node was removed). The sums
are those of the usage rows, unchanged: a report's rows add up to the accounting tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.store.daily import within
from gpupool.store.db import in_chunks
from gpupool.store.energy import EnergyRepo
from gpupool.store.rows import AllocationRow, GpuRow, ShareRow, UsageRow, WorkloadRow

By = Literal["tenant", "user", "model"]
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True, slots=True)
class ChargeRow:
    key: str
    gpu_seconds_allocated: float
    gpu_seconds_busy: float
    gpu_memory_mib_seconds: float
    #: GPU-seconds telemetry measured (busy and memory are known for these only)
    gpu_seconds_measured: float
    #: GPU-seconds whose busy time telemetry estimated (MPS shares), not measured
    gpu_seconds_estimated: float
    workloads: int
    #: joules from the GPUs' energy counters, by share (None: none recorded for this key)
    energy_joules: float | None = None


def models_of(s: Session, workload_ids: Iterable[str]) -> dict[str, str]:
    """Workload id -> the GPU model its usage counts on (see the module docstring)."""
    ids = sorted(set(workload_ids))
    out: dict[str, str] = {}
    for chunk in in_chunks(ids):
        for wid, model in s.execute(
            select(WorkloadRow.id, WorkloadRow.gpu_model).where(WorkloadRow.id.in_(chunk))
        ):
            if model:
                out[wid] = model
        rest = [w for w in chunk if w not in out]
        if rest:
            q = (
                select(AllocationRow.workload_id, GpuRow.model, AllocationRow.since)
                .join(ShareRow, ShareRow.allocation_id == AllocationRow.id)
                .join(GpuRow, GpuRow.uuid == ShareRow.gpu_uuid)
                .where(AllocationRow.workload_id.in_(rest))
                .order_by(AllocationRow.since)
            )
            for wid, model, _ in s.execute(q):
                out[wid] = model  # the latest allocation's model wins
    return {w: out.get(w, UNKNOWN_MODEL) for w in ids}


class ChargebackRepo:
    def __init__(self, s: Session):
        self.s = s

    def report(
        self,
        by: By,
        *,
        from_day: str | None = None,
        to_day: str | None = None,
        tenants: Iterable[str] | None = None,
        user: str | None = None,
    ) -> list[ChargeRow]:
        """Sums of the usage rows over days in [from_day, to_day] (inclusive) per `by`."""
        q = select(
            UsageRow.workload_id,
            UsageRow.tenant,
            UsageRow.user,
            UsageRow.gpu_seconds_allocated,
            UsageRow.gpu_seconds_busy,
            UsageRow.gpu_memory_mib_seconds,
            UsageRow.gpu_seconds_measured,
            UsageRow.gpu_seconds_estimated,
        ).order_by(UsageRow.id)
        q = q.where(*within(UsageRow, from_day=from_day, to_day=to_day, tenants=tenants, user=user))
        rows = list(self.s.execute(q))
        energy = EnergyRepo(self.s).rows(
            from_day=from_day, to_day=to_day, tenants=tenants, user=user
        )
        ids = [r[0] for r in rows] + [e[0] for e in energy]
        model = models_of(self.s, ids) if by == "model" else {}

        def key_of(wid: str, tenant: str, usr: str) -> str:
            return tenant if by == "tenant" else usr if by == "user" else model[wid]

        acc: dict[str, list[float]] = {}
        seen: dict[str, set[str]] = {}
        for wid, tenant, usr, alloc, busy, mem, measured, estimated in rows:
            key = key_of(wid, tenant, usr)
            a = acc.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
            a[0] += alloc
            a[1] += busy
            a[2] += mem
            a[3] += measured or 0.0
            a[4] += estimated or 0.0
            seen.setdefault(key, set()).add(wid)
        joules: dict[str, float] = {}
        for wid, tenant, usr, j in energy:
            key = key_of(wid, tenant, usr)
            joules[key] = joules.get(key, 0.0) + j
        return [
            ChargeRow(k, *acc[k], workloads=len(seen[k]), energy_joules=joules.get(k))
            for k in sorted(acc)
        ]

    def used_gpu_seconds(
        self, tenant: str, from_day: str, to_day: str, model: str | None = None
    ) -> float:
        """GPU-seconds allocated to `tenant`'s subtree over [from_day, to_day] (on `model`)."""
        kept = within(UsageRow, from_day=from_day, to_day=to_day, tenants=[tenant])
        allocated = func.sum(UsageRow.gpu_seconds_allocated)
        if model is None:
            return float(self.s.scalar(select(allocated).where(*kept)) or 0.0)
        q = select(UsageRow.workload_id, allocated).where(*kept).group_by(UsageRow.workload_id)
        rows = list(self.s.execute(q))
        of = models_of(self.s, (w for w, _ in rows))
        return float(sum(v or 0.0 for w, v in rows if of[w] == model))
