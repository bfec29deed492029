"""Admissions in batches (`AdmissionRepo.admit`): a refused admission leaves the others
committed, and the rows and events written are those of the one-by-one path (`allocate` then
`change_state(expect={pending})` in a savepoint each). Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpupool.domain import Allocation, Enforcement, Share, WorkloadState
from gpupool.scheduler.types import PendingInfo
from gpupool.store import AdmissionRepo, AllocationRepo, Conflict, NodeRepo, WorkloadRepo
from gpupool.store.rows import AllocationRow, EventRow, ShareRow, WorkloadRow
from tests.store.test_store import node, seed, whole, workload

S = WorkloadState


def part(wid: str, idx: int, milli: int, mem: int, node_name: str = "n1") -> Allocation:
    share = Share(node_name, idx, f"GPU-{node_name}-{idx}", milli, mem, Enforcement.POLICED)
    return Allocation(wid, node_name, (share,), 1.0)


def test_a_refused_admission_leaves_the_others_committed(store):
    seed(store)
    ids = [f"w-{i}" for i in range(5)]
    with store.write() as s:
        for wid in ids:
            WorkloadRepo(s).add(workload(wid))
        AllocationRepo(s).allocate(whole("w-0", idx=0))  # another writer took GPU 0
    batch = [
        (whole("w-1", idx=0), "admitted on n1: GPU 0"),  # raced: GPU 0 has no room now
        (whole("w-2", idx=1), "admitted on n1: GPU 1"),
        (Allocation("w-3", "n1", (), 1.0, cpu_milli=1000), "admitted on n1 (CPU only)"),
        (whole("w-4", idx=1), "admitted on n1: GPU 1"),  # GPU 1 went to w-2 just before
    ]
    with store.write() as s:
        done = AdmissionRepo(s).admit(batch, 5.0)
    assert [w.id for w in done.workloads] == ["w-2", "w-3"]
    assert all(w.state is S.ADMITTED and w.admitted_at == 5.0 for w in done.workloads)
    assert set(done.refused) == {"w-1", "w-4"}
    assert "0 GPU and 0 MiB free" in done.refused["w-1"]
    with store.read() as s:
        repo = WorkloadRepo(s)
        states = {wid: repo.get(wid).state for wid in ids}
        held = AllocationRepo(s).active_for_many(ids)
    assert states == {"w-0": S.PENDING, "w-1": S.PENDING, "w-2": S.ADMITTED,
                      "w-3": S.ADMITTED, "w-4": S.PENDING}  # fmt: skip
    assert set(held) == {"w-0", "w-2", "w-3"}


class _Undo(Exception):
    pass


def _dump(s) -> dict[str, list[tuple]]:
    """Every row the admissions write, surrogate ids replaced by what they point at (ids from
    PostgreSQL's sequences are not rolled back), in insertion order."""
    allocs = {r.id: r.workload_id for r in s.scalars(select(AllocationRow))}
    wcols = [c for c in WorkloadRow.__table__.c]
    acols = [c for c in AllocationRow.__table__.c if c.key != "id"]
    scols = [c for c in ShareRow.__table__.c if c.key not in ("id", "allocation_id")]
    ecols = [c for c in EventRow.__table__.c if c.key != "id"]
    return {
        "workloads": [tuple(r) for r in s.execute(select(*wcols).order_by(WorkloadRow.id))],
        "allocations": [tuple(r) for r in s.execute(select(*acols).order_by(AllocationRow.id))],
        "shares": [
            (allocs[r[0]], *r[1:])
            for r in s.execute(select(ShareRow.allocation_id, *scols).order_by(ShareRow.id))
        ],
        "events": [tuple(r) for r in s.execute(select(*ecols).order_by(EventRow.id))],
    }


def test_the_rows_written_are_those_of_one_admission_at_a_time(store):
    seed(store)
    ids = [f"w-{i}" for i in range(10)]
    with store.write() as s:
        NodeRepo(s).upsert(node("n2", gpus=2, mem=40960))
        repo = WorkloadRepo(s)
        for i, wid in enumerate(ids):
            repo.add(workload(wid, submitted_at=float(i)))
        repo.set_pending_info({wid: PendingInfo("waiting", i, 1) for i, wid in enumerate(ids)})
        AllocationRepo(s).allocate(whole("w-0", idx=0))
        repo.change_state("w-0", S.ADMITTED, 1.0, "admitted earlier")
        repo.change_state("w-8", S.CANCELLED, 1.0, "cancelled meanwhile")
    batch = [
        whole("w-1", idx=0),  # held by w-0
        part("w-2", 1, 500, 30000),
        part("w-3", 1, 500, 30000),
        part("w-4", 1, 100, 1000),  # GPU 1 is full by milli now
        part("w-5", 0, 500, 20000, "n2"),
        part("w-6", 0, 500, 30000, "n2"),  # memory: 20480 MiB left
        Allocation("w-7", "n1", (Share("n1", 1, "GPU-n2-1", 1000, 40960),), 1.0),  # wrong node
        whole("w-8", idx=1),  # cancelled (and would not fit either)
        Allocation("w-9", "n2", (), 1.0, cpu_milli=2000, memory_mib=4096),
        whole("w-0", "n2", idx=1, mem=40960),  # already holds an allocation
    ]
    todo = [(a, f"admitted {a.workload_id}") for a in batch]

    # one by one, then undone
    refused: dict[str, str] = {}
    with pytest.raises(_Undo), store.write() as s:
        repo, allocs = WorkloadRepo(s), AllocationRepo(s)
        for a, reason in todo:
            try:
                with s.begin_nested():
                    allocs.allocate(a)
                    repo.change_state(a.workload_id, S.ADMITTED, 7.0, reason, expect={S.PENDING})
            except Conflict as e:
                refused[a.workload_id] = str(e)
        s.flush()
        one_by_one = _dump(s)
        raise _Undo

    with store.write() as s:
        done = AdmissionRepo(s).admit(todo, 7.0)
    with store.read() as s:
        batched = _dump(s)
        admitted = [WorkloadRepo(s).get(w.id) for w in done.workloads]

    assert done.refused == refused
    assert set(refused) == {"w-1", "w-4", "w-6", "w-7", "w-8", "w-0"}
    assert [w.id for w in done.workloads] == ["w-2", "w-3", "w-5", "w-9"]
    assert admitted == done.workloads
    assert batched == one_by_one
