"""The allocations repository: what each workload holds, on which GPUs.

`AllocationRepo.allocate` refuses shares that would oversubscribe a GPU, checked against
the committed allocations while holding the GPUs' row locks (see `store.db`); the scheduler
loop admits in batches with the same checks (`store.admissions`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, func, select, update
from sqlalchemy.orm import Session

from gpupool.domain import (
    ACTIVE_STATES,
    MILLI_PER_GPU,
    Allocation,
    Enforcement,
    WorkloadState,
)
from gpupool.scheduler.types import RunningWorkload
from gpupool.store.convert import (
    allocation_to_domain,
    allocation_to_row,
    share_to_domain,
    workload_to_domain,
)
from gpupool.store.db import in_chunks, plain_execute
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import (
    DOMAIN_COLUMNS,
    AllocationRow,
    GpuRow,
    ShareRow,
    WorkloadRow,
    by_name,
    domain_workload,
)

_ALLOC_KEYS = tuple(c.key for c in AllocationRow.__table__.c)
_SHARE_KEYS = tuple(c.key for c in ShareRow.__table__.c)
#: one active workload as plain values: (its `DOMAIN_COLUMNS`, its allocation's row, its
#: shares' rows by GPU index)
RunningRows = tuple[tuple[Any, ...], tuple[Any, ...], tuple[tuple[Any, ...], ...]]


def allocation_of(row: Any, shares: Iterable[Any]) -> Allocation:
    """The allocation of a plain row of the allocations table's columns and its shares' plain
    rows, read by attribute (Core `Row`s: `AllocationRepo._active_rows`)."""
    return allocation_to_domain(row, tuple(share_to_domain(sh) for sh in shares))


def allocation_of_values(values: Sequence[Any], shares: Iterable[Sequence[Any]]) -> Allocation:
    """The allocation of the values of an allocation row and of its shares' rows, each in its
    table's column order (the tuples of `AllocationRepo.running_rows`)."""
    return allocation_to_domain(
        by_name(_ALLOC_KEYS, values),
        tuple(share_to_domain(by_name(_SHARE_KEYS, sh)) for sh in shares),
    )


def running_of(
    workload: tuple[Any, ...], allocation: tuple[Any, ...], shares: Iterable[tuple[Any, ...]]
) -> RunningWorkload:
    """The running workload of one `AllocationRepo.running_rows()` entry."""
    w = domain_workload(workload)
    return RunningWorkload(
        workload_to_domain(w),
        allocation_of_values(allocation, shares),
        stopping=w.stop_state is not None,
    )


def room_refusal(
    allocation: Allocation, gpus: Mapping[str, Any], used: Mapping[str, Sequence[int]]
) -> str | None:
    """Why `allocation`'s shares do not fit (None: they do): a share's GPU missing or not on
    its node, or a GPU without the GPU milli or memory left. `gpus`: uuid -> a row with
    `node`, `index`, `memory_mib` (locked by the caller); `used`: uuid -> (milli, memory MiB)
    held there now. The one rule behind `AllocationRepo.allocate` and `AdmissionRepo.admit`."""
    want: dict[str, list[int]] = {}
    for sh in allocation.shares:
        g = gpus.get(sh.gpu_uuid)
        if g is None or g.node != sh.node:  # a multi-node allocation spans nodes
            return f"GPU {sh.gpu_uuid} is not on node {sh.node}"
        acc = want.setdefault(sh.gpu_uuid, [0, 0])
        acc[0] += sh.milli
        acc[1] += sh.memory_mib
    for uuid, (milli, mem) in want.items():
        held_milli, held_mem = used.get(uuid, (0, 0))
        g = gpus[uuid]
        if held_milli + milli > MILLI_PER_GPU or held_mem + mem > g.memory_mib:
            return (
                f"GPU {g.index} on {g.node} ({uuid}) has "
                f"{(MILLI_PER_GPU - held_milli) / 1000:g} GPU and "
                f"{g.memory_mib - held_mem} MiB free, not enough for this share"
            )
    return None


class AllocationRepo:
    def __init__(self, s: Session):
        self.s = s

    def active_for(self, workload_id: str) -> Allocation | None:
        row = self.s.scalar(
            select(AllocationRow).where(
                AllocationRow.workload_id == workload_id, AllocationRow.released_at.is_(None)
            )
        )
        return None if row is None else allocation_to_domain(row)

    def last_for(self, workload_id: str) -> tuple[Allocation, float | None] | None:
        """The workload's latest allocation (active or released) and its release time."""
        row = self.s.scalar(
            select(AllocationRow)
            .where(AllocationRow.workload_id == workload_id)
            .order_by(AllocationRow.id.desc())
            .limit(1)
        )
        return None if row is None else (allocation_to_domain(row), row.released_at)

    def released_since(self, since: float) -> list[tuple[Allocation, float]]:
        """Allocations released at or after `since`, with their release time, oldest first."""
        q = (
            select(AllocationRow)
            .where(AllocationRow.released_at >= since)
            .order_by(AllocationRow.released_at)
        )
        return [(allocation_to_domain(r), float(r.released_at or 0.0)) for r in self.s.scalars(q)]

    def active_for_many(self, workload_ids: Collection[str]) -> dict[str, Allocation]:
        """Active allocations of the given workloads, by workload id."""
        if not workload_ids:
            return {}
        return self._active_by_workload(AllocationRow.workload_id.in_(list(workload_ids)))

    def _active_by_workload(self, *where: ColumnElement[bool]) -> dict[str, Allocation]:
        """Active allocations matching `where`, read as plain rows (two queries, no ORM
        objects: this is on the path of every list and every scheduling pass)."""
        return {r.workload_id: allocation_of(r, shares) for r, shares in self._active_rows(*where)}

    def _active_rows(self, *where: ColumnElement[bool]) -> list[tuple[Row[Any], list[Row[Any]]]]:
        """Plain rows of the active allocations matching `where`, each with its shares' rows
        (by GPU index). Read past the ORM, after a flush (`plain_execute`)."""
        q = select(*AllocationRow.__table__.c).where(AllocationRow.released_at.is_(None), *where)
        run = plain_execute(self.s)  # plain rows (flushed first: see plain_execute)
        rows = run(q).all()
        if not rows:
            return []
        shares: dict[int, list[Row[Any]]] = {}
        ids = [r.id for r in rows]
        for part in in_chunks(ids):
            sq = (
                select(*ShareRow.__table__.c)
                .where(ShareRow.allocation_id.in_(part))
                .order_by(ShareRow.gpu_index, ShareRow.id)
            )
            for sh in run(sq):
                shares.setdefault(sh.allocation_id, []).append(sh)
        return [(r, shares.get(r.id, [])) for r in rows]

    def active(self) -> list[Allocation]:
        q = select(AllocationRow).where(AllocationRow.released_at.is_(None))
        return [allocation_to_domain(r) for r in self.s.scalars(q)]

    def running(self) -> list[RunningWorkload]:
        """Active workloads (admitted, starting, running) with their allocations."""
        return [running_of(*r) for _, r in self.running_rows()]

    def running_rows(self, ids: Sequence[str] | None = None) -> list[tuple[int, RunningRows]]:
        """What `running()` is made of, as plain values: per active workload (of `ids` only,
        if given), its version (`WorkloadRow.version`) and its `DOMAIN_COLUMNS`, its
        allocation's row and its shares' rows (by GPU index); equal values make equal
        `running_of(...)`. For the scheduler loop, which reads only the workloads whose
        `running_versions` entry moved. Read past the ORM, after a flush (`plain_execute`)."""
        if ids is None:
            return self._running_rows()
        out = []
        for part in in_chunks(ids):
            out += self._running_rows(part)
        return out

    def _running_rows(self, ids: Sequence[str] | None = None) -> list[tuple[int, RunningRows]]:
        """`running_rows` of every active workload, or of those of `ids` (one IN list)."""
        only_a = () if ids is None else (AllocationRow.workload_id.in_(ids),)
        allocs = {
            r.workload_id: (tuple(r), tuple(map(tuple, sh))) for r, sh in self._active_rows(*only_a)
        }
        only_w = () if ids is None else (WorkloadRow.id.in_(ids),)
        q = (
            select(WorkloadRow.version, *DOMAIN_COLUMNS)
            .join(AllocationRow, AllocationRow.workload_id == WorkloadRow.id)
            .where(
                AllocationRow.released_at.is_(None),
                WorkloadRow.state.in_([str(s) for s in ACTIVE_STATES]),
                *only_w,
            )
        )
        out = []
        for r in plain_execute(self.s)(q):  # plain rows (flushed first: see plain_execute)
            a = allocs.get(r[1])
            if a is not None:
                out.append((r[0], (tuple(r[1:]), a[0], a[1])))
        return out

    def running_versions(self) -> list[tuple[str, int, int]]:
        """(workload id, version, allocation id) of each workload `running_rows` lists: a
        workload whose entry is unchanged since an earlier read has the same `running_rows`
        values (its domain columns by the version; its allocation and shares: an allocation
        only ever leaves the active ones, and `set_enforcement`, the one writer of shares,
        raises the version)."""
        q = (
            select(WorkloadRow.id, WorkloadRow.version, AllocationRow.id)
            .join(AllocationRow, AllocationRow.workload_id == WorkloadRow.id)
            .where(
                AllocationRow.released_at.is_(None),
                WorkloadRow.state.in_([str(s) for s in ACTIVE_STATES]),
            )
        )
        return [tuple(r) for r in plain_execute(self.s)(q)]  # type: ignore[misc]

    def gpu_usage(self, uuids: Collection[str] | None = None) -> dict[str, tuple[int, int]]:
        """GPU uuid -> (milli, memory MiB) held by active allocations."""
        q = (
            select(ShareRow.gpu_uuid, func.sum(ShareRow.milli), func.sum(ShareRow.memory_mib))
            .join(AllocationRow, AllocationRow.id == ShareRow.allocation_id)
            .where(AllocationRow.released_at.is_(None))
            .group_by(ShareRow.gpu_uuid)
        )
        if uuids is not None:
            q = q.where(ShareRow.gpu_uuid.in_(list(uuids)))
        return {u: (int(m or 0), int(mem or 0)) for u, m, mem in self.s.execute(q)}

    def allocate(self, allocation: Allocation) -> None:
        """Record `allocation`; raise Conflict if the workload already holds one or if any
        share does not fit what its GPU has left."""
        if self.active_for(allocation.workload_id) is not None:
            raise Conflict(f"workload {allocation.workload_id} already holds an allocation")
        uuids = sorted({s.gpu_uuid for s in allocation.shares})
        if uuids:
            # Lock the GPUs (PostgreSQL; SQLite's write transaction already excludes writers).
            gpus = {
                g.uuid: g
                for g in self.s.scalars(
                    select(GpuRow)
                    .where(GpuRow.uuid.in_(uuids))
                    .order_by(GpuRow.uuid)
                    .with_for_update()
                )
            }
            why = room_refusal(allocation, gpus, self.gpu_usage(uuids))
            if why is not None:
                raise Conflict(why)
        self.s.add(allocation_to_row(allocation))
        self.s.flush()

    def set_enforcement(self, workload_id: str, enforcement: Mapping[str, Enforcement]) -> None:
        """Record on the workload's active allocation the enforcement really applied on some
        of its GPUs (GPU uuid -> enforcement); other shares are left as they are."""
        alloc_id = self.s.scalar(
            select(AllocationRow.id).where(
                AllocationRow.workload_id == workload_id, AllocationRow.released_at.is_(None)
            )
        )
        if alloc_id is None:
            raise NotFound(f"workload {workload_id} holds no allocation")
        for uuid, enf in enforcement.items():
            self.s.execute(
                update(ShareRow)
                .where(ShareRow.allocation_id == alloc_id, ShareRow.gpu_uuid == uuid)
                .values(enforcement=str(enf))
            )
        if enforcement:  # the running workload changed: its version says so
            self.s.execute(
                update(WorkloadRow)
                .where(WorkloadRow.id == workload_id)
                .values(version=WorkloadRow.version + 1)
            )

    def release(self, workload_id: str, now: float, to: WorkloadState | None = None) -> None:
        """End the workload's active allocation at `now`; `to`: the state the workload moves
        to (kept as `released_as`: which attempts ended in a preemption)."""
        self.s.execute(
            update(AllocationRow)
            .where(AllocationRow.workload_id == workload_id, AllocationRow.released_at.is_(None))
            .values(released_at=now, released_as=None if to is None else str(to))
        )
