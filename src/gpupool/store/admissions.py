"""Admissions in batches: `AdmissionRepo.admit` commits many admissions in the caller's
transaction with a few statements for the whole batch.

One admission is an allocation and its workload's move `pending -> admitted` (with the event
`workload.admitted`): what `AllocationRepo.allocate` then `WorkloadRepo.change_state(...,
expect={pending})` write, in a savepoint each so that a refused one undoes only itself. Here
every check is made first, for the batch and in its order, under the same locks (the GPUs'
rows and the workloads' rows on PostgreSQL; SQLite's write transaction excludes writers), each
admission accepted counting against the room of those after it; then only the accepted ones
are written. A refused admission writes nothing and undoes nothing else, as with the
savepoints, and the rows and events written are the same, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from gpupool.domain import Allocation, Workload, WorkloadState, transition
from gpupool.store.allocations import AllocationRepo, room_refusal
from gpupool.store.convert import (
    LIFECYCLE_FIELDS,
    allocation_values,
    event_values,
    lifecycle_values,
    share_values,
    workload_to_domain,
)
from gpupool.store.db import in_chunks
from gpupool.store.errors import NotFound
from gpupool.store.rows import (
    NOTE_KEYS,
    AllocationRow,
    EventRow,
    GpuRow,
    ShareRow,
    WorkloadRow,
)
from gpupool.store.workloads import lock_workload_rows

_W = cast(Table, WorkloadRow.__table__)
_A = cast(Table, AllocationRow.__table__)
_SH = cast(Table, ShareRow.__table__)
_EV = cast(Table, EventRow.__table__)
#: a workload admitted: the columns a transition may change (`LIFECYCLE_FIELDS`, bound as
#: `b_<column>`) and its why-pending notes cleared, as `WorkloadRepo.change_state` writes them
_SET_ADMITTED = (
    update(_W)
    .where(_W.c.id == bindparam("b_id"))
    .values({k: bindparam(f"b_{k}") for k in LIFECYCLE_FIELDS} | dict.fromkeys(NOTE_KEYS))
)


@dataclass
class Admitted:
    """What `AdmissionRepo.admit` did: the workloads admitted (as stored now, in the order
    given) and, for each refused one, why (the message `allocate` or `change_state` would
    raise as Conflict)."""

    workloads: list[Workload] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class AdmissionRepo:
    def __init__(self, s: Session):
        self.s = s

    def admit(self, admissions: Sequence[tuple[Allocation, str]], now: float) -> Admitted:
        """Record each (allocation, reason) as its workload's admission at `now` (see the
        module): refused if the workload already holds an allocation, if a share's GPU is not
        on its node or lacks room for it, or if the workload is no longer pending. Raises
        NotFound, like `change_state`, for a workload that does not exist."""
        out = Admitted()
        if not admissions:
            return out
        ids = [a.workload_id for a, _ in admissions]
        uuids = sorted({sh.gpu_uuid for a, _ in admissions for sh in a.shares})
        gpus = self._lock_gpus(uuids)
        used = {u: list(v) for u, v in AllocationRepo(self.s).gpu_usage(uuids).items()}
        holding = self._holding(ids)
        current = self._lock_workloads(ids)
        accepted: list[tuple[Allocation, Workload, str]] = []
        for alloc, reason in admissions:
            wid = alloc.workload_id
            why = self._refusal(alloc, gpus, used, holding)
            if why is None:
                if wid not in current:
                    raise NotFound(f"no workload {wid!r}; list yours with GET /api/v1/workloads")
                w = current[wid]
                if w.state is not WorkloadState.PENDING:
                    why = f"workload {wid} is {w.state}, not pending"
            if why is not None:
                out.refused[wid] = why
                continue
            for sh in alloc.shares:  # its room is taken for the admissions after it
                acc = used.setdefault(sh.gpu_uuid, [0, 0])
                acc[0] += sh.milli
                acc[1] += sh.memory_mib
            holding.add(wid)
            accepted.append((alloc, current[wid], reason))
        if accepted:
            out.workloads = self._write(accepted, now)
        return out

    def _lock_gpus(self, uuids: list[str]) -> dict[str, Any]:
        """The GPUs' (uuid, node, index, memory) rows, locked (PostgreSQL) in uuid order."""
        gpus: dict[str, Any] = {}
        run = self.s.connection().execute
        for part in in_chunks(uuids):
            q = (
                select(GpuRow.uuid, GpuRow.node, GpuRow.index, GpuRow.memory_mib)
                .where(GpuRow.uuid.in_(part))
                .order_by(GpuRow.uuid)
                .with_for_update()
            )
            gpus.update((r.uuid, r) for r in run(q))
        return gpus

    def _holding(self, ids: Sequence[str]) -> set[str]:
        """Those of `ids` that hold an active allocation."""
        out: set[str] = set()
        run = self.s.connection().execute
        for part in in_chunks(ids):
            q = select(AllocationRow.workload_id).where(
                AllocationRow.workload_id.in_(part), AllocationRow.released_at.is_(None)
            )
            out.update(run(q).scalars())
        return out

    def _lock_workloads(self, ids: Sequence[str]) -> dict[str, Workload]:
        """The workloads, their rows locked (PostgreSQL) in id order."""
        rows = lock_workload_rows(self.s, ids)
        return {wid: workload_to_domain(r) for wid, r in rows.items()}

    @staticmethod
    def _refusal(
        alloc: Allocation,
        gpus: dict[str, Any],
        used: dict[str, list[int]],
        holding: set[str],
    ) -> str | None:
        """Why `allocate` would refuse `alloc` given what is held (None: it fits)."""
        if alloc.workload_id in holding:
            return f"workload {alloc.workload_id} already holds an allocation"
        return room_refusal(alloc, gpus, used)

    def _write(
        self, accepted: list[tuple[Allocation, Workload, str]], now: float
    ) -> list[Workload]:
        """Insert the allocations and their shares, move the workloads to admitted and append
        their events (plain Core statements, one per table)."""
        run = self.s.connection().execute
        ins = insert(_A).returning(_A.c.id, sort_by_parameter_order=True)
        alloc_ids = run(
            ins,
            [allocation_values(a) for a, _, _ in accepted],
        ).scalars()
        shares = [
            {"allocation_id": aid, **share_values(s)}
            for aid, (a, _, _) in zip(alloc_ids, accepted, strict=True)
            for s in a.shares
        ]
        if shares:
            run(insert(_SH), shares)
        admitted, changes, events = [], [], []
        for _, w, reason in accepted:
            new, event = transition(w, WorkloadState.ADMITTED, now, reason)
            admitted.append(new)
            changes.append(
                {"b_id": new.id} | {f"b_{k}": v for k, v in lifecycle_values(new).items()}
            )
            events.append(event_values(event))
        run(_SET_ADMITTED, changes)
        run(insert(_EV), events)
        return admitted
