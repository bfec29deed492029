"""Kept attained service (gpupool.store.attained) and migration 0013 (allocations.released_as),
on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from gpupool.domain import Allocation, Request, Share, WorkloadState
from gpupool.store import AllocationRepo, WorkloadRepo, kept_service, open_store
from gpupool.store.attained import attained_milli_s, attempt_milli_s
from gpupool.store.db import MIGRATIONS
from tests.store.databases import DB_PARAMS, store_url
from tests.store.test_store import seed, workload

S = WorkloadState
T0 = 1_780_000_000.0


def alloc(wid: str, since: float, gpus: tuple[int, ...] = (0, 1)) -> Allocation:
    return Allocation(
        wid, "n1", tuple(Share("n1", i, f"GPU-n1-{i}", 1000, 81920) for i in gpus), since
    )


def attempt(store, wid: str, start: float, end: float, to: WorkloadState, gpus=(0, 1)) -> None:
    """Admit `wid` at `start`, run it, and end the attempt at `end` by moving it to `to`
    (a preemption is requeued when the workload allows it)."""
    with store.write() as s:
        repo = WorkloadRepo(s)
        AllocationRepo(s).allocate(alloc(wid, start, gpus))
        repo.change_state(wid, S.ADMITTED, start, "admitted")
        repo.change_state(wid, S.STARTING, start, "starting")
        if to is S.PENDING:  # the start did not take
            repo.change_state(wid, S.PENDING, end, "the pod stayed Pending")
            return
        repo.change_state(wid, S.RUNNING, start, "running")
        repo.change_state(wid, to, end, "ended")
        if to is S.PREEMPTED and repo.get(wid).requeue_on_preemption:
            repo.change_state(wid, S.PENDING, end, "requeued after preemption")


def test_only_preempted_attempts_of_checkpointing_work_are_kept(store):
    seed(store)
    ckpt, plain, once = workload(checkpointing=True, gpus=2), workload(gpus=2), workload(gpus=2)
    with store.write() as s:
        for w in (ckpt, plain, once):
            WorkloadRepo(s).add(w)
    attempt(store, ckpt.id, T0, T0 + 3600, S.PREEMPTED)  # 2 GPUs x 1 h
    attempt(store, ckpt.id, T0 + 4000, T0 + 4600, S.PENDING)  # never ran: not kept
    attempt(store, ckpt.id, T0 + 5000, T0 + 5900, S.PREEMPTED, gpus=(0,))  # 1 GPU x 15 min
    attempt(store, plain.id, T0, T0 + 3600, S.PREEMPTED)  # restarts from scratch
    with store.read() as s:
        kept = kept_service(s)
        assert kept == {ckpt.id: pytest.approx(7.2e6 + 9e5)}
        assert kept_service(s, workload_ids=[plain.id, once.id]) == {}
        assert kept_service(s, states={S.RUNNING}) == {}  # it waits: not in those states
    attempt(store, ckpt.id, T0 + 6000, T0 + 6000 + 1800, S.SUCCEEDED)
    with store.read() as s:
        assert kept_service(s) == {}  # it has ended
        ended = WorkloadRepo(s).get(ckpt.id)
        assert kept_service(s, workload_ids=[ckpt.id]) == {ckpt.id: pytest.approx(8.1e6)}
    # shown: the kept attempts and the last one (2 GPUs x 30 min)
    assert attained_milli_s(ended, 8.1e6) == pytest.approx(8.1e6 + 3.6e6)


def test_released_allocations_record_what_the_workload_became(store):
    seed(store)
    w = workload(gpus=2)
    with store.write() as s:
        WorkloadRepo(s).add(w)
    attempt(store, w.id, T0, T0 + 60, S.PREEMPTED)
    attempt(store, w.id, T0 + 100, T0 + 200, S.PENDING)
    attempt(store, w.id, T0 + 300, T0 + 400, S.FAILED)
    with store.read() as s:
        got = s.execute(
            text("SELECT released_as FROM allocations WHERE workload_id = :w ORDER BY id"),
            {"w": w.id},
        ).scalars()
        assert list(got) == ["preempted", "pending", "failed"]


def test_the_attempt_part_follows_the_state():
    from gpupool.domain import Workload

    base = Workload("w-1", "lab", "ann", Request(gpus=2), checkpointing=True)
    running = alloc("w-1", T0)
    active = Workload(**{**_fields(base), "state": S.RUNNING, "admitted_at": T0})
    assert attempt_milli_s(active, running, T0 + 10) == 20_000
    assert attempt_milli_s(base) == 0.0  # pending: only what it kept
    done = {**_fields(base), "admitted_at": T0, "finished_at": T0 + 10}
    assert attempt_milli_s(Workload(**{**done, "state": S.SUCCEEDED})) == 20_000
    # ended by a preemption without requeue: a checkpointing workload kept that attempt
    assert attempt_milli_s(Workload(**{**done, "state": S.PREEMPTED})) == 0.0
    plain = Workload(**{**done, "state": S.PREEMPTED, "checkpointing": False})
    assert attempt_milli_s(plain) == 20_000
    mig = Workload(**{**done, "state": S.SUCCEEDED, "request": Request(mig="3g.40gb")})
    assert attempt_milli_s(mig) == 10 * (3 * 1000 // 7)


def _fields(w) -> dict:
    return {f: getattr(w, f) for f in w.__dataclass_fields__}


@pytest.mark.parametrize("kind", DB_PARAMS)
def test_migration_0013_marks_earlier_preemptions(kind, tmp_path):
    url = store_url(kind, tmp_path)
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0012")
        conn.commit()
        # a workload preempted (and requeued) at T0+60, then failed to start at T0+200
        conn.execute(
            text(
                "INSERT INTO nodes (name, cpu_milli, memory_mib, labels, state) "
                "VALUES ('n1', 0, 0, '{}', 'ready')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO tenants (name, guaranteed_milli, weight, "
                "guaranteed_by_model, created_at) VALUES ('lab', 0, 1, '{}', 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO users (name, admin, disabled, created_at) "
                "VALUES ('ann', false, false, 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workloads (id, tenant, owner, kind, state, gpus, gpu_milli, "
                "gpu_memory_mib, cpu_milli, memory_mib, nodes, priority, preemptible, "
                "requeue_on_preemption, checkpointing, submitted_at, command, preemptions, "
                "start_attempts) VALUES ('w-old', 'lab', 'ann', 'job', 'pending', 1, 0, 0, 0, "
                "0, 1, 0, true, true, true, 0, '[]', 1, 0)"
            )
        )
        for aid, since, end in ((1, T0, T0 + 60), (2, T0 + 100, T0 + 200)):
            conn.execute(
                text(
                    "INSERT INTO allocations (id, workload_id, node, since, released_at, "
                    "cpu_milli, memory_mib) VALUES (:id, 'w-old', 'n1', :s, :e, 0, 0)"
                ),
                {"id": aid, "s": since, "e": end},
            )
            conn.execute(
                text(
                    "INSERT INTO shares (allocation_id, gpu_uuid, node, gpu_index, milli, "
                    "memory_mib, enforcement) VALUES (:id, 'GPU-n1-0', 'n1', 0, 1000, 1, "
                    "'policed')"
                ),
                {"id": aid},
            )
        for at, kind_ in (
            (T0 + 60, "workload.preempted"),
            (T0 + 60, "workload.pending"),
            (T0 + 200, "workload.pending"),
        ):
            conn.execute(
                text(
                    "INSERT INTO events (at, kind, message, workload_id, data) "
                    "VALUES (:at, :k, '', 'w-old', '{}')"
                ),
                {"at": at, "k": kind_},
            )
        conn.commit()
    engine.dispose()
    store = open_store(url)  # migrates to the head
    try:
        with store.read() as s:
            got = s.execute(text("SELECT released_as FROM allocations ORDER BY id")).scalars()
            assert list(got) == ["preempted", None]
            assert kept_service(s) == {"w-old": pytest.approx(60_000.0)}
    finally:
        store.close()
