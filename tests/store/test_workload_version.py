"""`workloads.version` (migration 0021): raised by the database on every write of a domain
column, whoever writes it, and by `set_enforcement` for its shares; never by the why-pending
notes. The scheduler loop's reader trusts it to skip unchanged rows, so the trigger's columns
must be exactly `DOMAIN_KEYS`. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import re

from sqlalchemy import select, text

from gpupool.domain import Enforcement, WorkloadState
from gpupool.scheduler.types import PendingInfo
from gpupool.store import AllocationRepo, WorkloadRepo
from gpupool.store.rows import DOMAIN_KEYS, WorkloadRow
from tests.store.test_store import seed, whole, workload

S = WorkloadState


def _trigger_columns(store) -> set[str]:
    with store.read() as s:
        if store.engine.dialect.name == "postgresql":
            q = text(
                "SELECT event_object_column FROM information_schema.triggered_update_columns "
                "WHERE trigger_name = 'workloads_version'"
            )
            return set(s.scalars(q))
        sql = s.scalar(text("SELECT sql FROM sqlite_master WHERE name = 'workloads_version'"))
    assert sql is not None, "the trigger is gone (a table rebuilt by a later migration?)"
    cols = re.search(r"UPDATE OF (.*?) ON workloads", sql)
    assert cols is not None
    return {c.strip() for c in cols.group(1).split(",")}


def _version(store, wid: str) -> int:
    with store.read() as s:
        return s.scalar(select(WorkloadRow.version).where(WorkloadRow.id == wid))


def test_the_trigger_watches_every_domain_column_and_no_other(store):
    assert _trigger_columns(store) == set(DOMAIN_KEYS)


def test_every_domain_write_raises_the_version_and_the_notes_do_not(store):
    seed(store)
    with store.write() as s:
        WorkloadRepo(s).add(workload("w-1"))
    assert _version(store, "w-1") == 0
    with store.write() as s:
        WorkloadRepo(s).set_pending_info({"w-1": PendingInfo("waiting", 1, 1)})
    assert _version(store, "w-1") == 0  # a note: unchanged
    with store.write() as s:
        AllocationRepo(s).allocate(whole("w-1"))
        WorkloadRepo(s).change_state("w-1", S.ADMITTED, 2.0, "admitted")  # through the ORM
    v1 = _version(store, "w-1")
    assert v1 > 0
    with store.write() as s:  # a plain statement, past every repository
        s.execute(text("UPDATE workloads SET executor_ref = 'pid-7' WHERE id = 'w-1'"))
    v2 = _version(store, "w-1")
    assert v2 > v1
    with store.write() as s:
        AllocationRepo(s).set_enforcement("w-1", {"GPU-n1-0": Enforcement.MPS})
    v3 = _version(store, "w-1")
    assert v3 > v2
    with store.write() as s:
        AllocationRepo(s).set_enforcement("w-1", {})
        WorkloadRepo(s).set_pending_info({})
    assert _version(store, "w-1") == v3


def test_the_lists_by_version_match_the_full_reads(store):
    seed(store)
    with store.write() as s:
        repo = WorkloadRepo(s)
        for i in range(3):
            repo.add(workload(f"w-{i}", submitted_at=float(i)))
        AllocationRepo(s).allocate(whole("w-1"))
        repo.change_state("w-1", S.ADMITTED, 2.0, "admitted")
    with store.read() as s:
        repo, allocs = WorkloadRepo(s), AllocationRepo(s)
        pending = repo.pending_versions()
        full = repo.domain_rows([wid for wid, _, _ in pending])
        running = allocs.running_versions()
        rows = allocs.running_rows([wid for wid, _, _ in running])
    assert [wid for wid, _, _ in pending] == ["w-0", "w-2"]
    assert {wid: v for wid, v, _ in pending} == {wid: v for wid, (v, _) in full.items()}
    assert (
        [(wid, v) for wid, v, _ in running]
        == [(r[0][0], v) for v, r in rows]
        == [("w-1", _version(store, "w-1"))]
    )
    assert running[0][2] == rows[0][1][1][0]  # the allocation's id
