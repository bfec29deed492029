"""Launches in batches (`LaunchRepo.launch`, steps from `lifecycle.launch_steps`): the rows
and events written are those of the one-by-one path (`set_executor_ref`,
`change_state(starting)`, `apply_status` of the first poll: what the scheduler loop wrote per
workload, and still writes for work its first poll finds ended); work started by the
reconciler first keeps only its reference; cancelled work is left alone. Runs on SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpupool.domain import WorkloadState
from gpupool.engines.common.executor import ExecState, ExecStatus
from gpupool.server.services import lifecycle
from gpupool.store import (
    AllocationRepo,
    Launch,
    LaunchRepo,
    NodeRepo,
    NotFound,
    WorkloadRepo,
)
from gpupool.store.launches import ALREADY_STARTED
from gpupool.store.rows import EventRow, WorkloadRow
from tests.store.test_store import node, seed, whole, workload

S = WorkloadState


class _Undo(Exception):
    pass


def _dump(s) -> dict[str, list[tuple]]:
    """Every workload row (without its version, which counts UPDATE statements: the batch
    makes fewer) and every event (without its surrogate id), in order."""
    ecols = [c for c in EventRow.__table__.c if c.key != "id"]
    wcols = [c for c in WorkloadRow.__table__.c if c.key != "version"]
    return {
        "workloads": [tuple(r) for r in s.execute(select(*wcols).order_by(WorkloadRow.id))],
        "events": [tuple(r) for r in s.execute(select(*ecols).order_by(EventRow.id))],
    }


def _status(wid: str, state: ExecState | None, endpoint: str | None = None) -> ExecStatus | None:
    return None if state is None else ExecStatus(wid, state, endpoint=endpoint)


#: workload id -> (its state before the launch, the first poll's state, the endpoint it says)
CASES = {
    "w-0": (S.ADMITTED, None, None),  # not visible yet
    "w-1": (S.ADMITTED, ExecState.RUNNING, "http://n1:8888"),
    "w-2": (S.ADMITTED, ExecState.STARTING, None),
    "w-3": (S.ADMITTED, ExecState.STARTING, "http://n1:9000"),
    "w-4": (S.ADMITTED, ExecState.RUNNING, None),
    "w-5": (S.STARTING, ExecState.RUNNING, None),  # the reconciler saw it start first
    "w-6": (S.RUNNING, ExecState.RUNNING, "http://n1:7000"),
    "w-7": (S.CANCELLED, ExecState.RUNNING, None),  # cancelled while it was being started
    "w-8": (S.PENDING, None, None),  # (requeued meanwhile: not admitted any more)
}


def _prepare(store) -> None:
    seed(store)
    with store.write() as s:
        NodeRepo(s).upsert(node("n1", gpus=len(CASES)))
        repo = WorkloadRepo(s)
        for i, (wid, (state, _, _)) in enumerate(CASES.items()):
            repo.add(workload(wid, submitted_at=float(i)))
            if state is S.PENDING:
                continue
            AllocationRepo(s).allocate(whole(wid, idx=i))
            repo.change_state(wid, S.ADMITTED, 2.0, "admitted")
            if state in (S.STARTING, S.RUNNING):
                repo.change_state(wid, S.STARTING, 3.0, "the executor launched it")
            if state is S.RUNNING:
                repo.change_state(wid, S.RUNNING, 3.0, "the executor reports it running")
            if state is S.CANCELLED:
                repo.change_state(wid, S.CANCELLED, 3.0, "cancelled by ann")


def _one_by_one(s, at: float) -> tuple[list[str], list[str]]:
    """Each launch on its own, through the ORM repository and `apply_status` (what the loop
    still does for work its first poll finds ended)."""
    repo = WorkloadRepo(s)
    started, cancelled = [], []
    for wid, (_, poll, endpoint) in sorted(CASES.items()):
        status = _status(wid, poll, endpoint)
        state = repo.record(wid, lock=True).workload.state
        if state is S.ADMITTED:
            repo.set_executor_ref(wid, f"ref-{wid}")
            repo.change_state(wid, S.STARTING, at, "started by the fake executor")
            if status is not None:
                lifecycle.apply_status(s, repo.record(wid), status, at)
        elif state in ALREADY_STARTED:
            repo.set_executor_ref(wid, f"ref-{wid}")
        else:
            cancelled.append(wid)
            continue
        started.append(wid)
    return started, cancelled


def test_a_batch_writes_what_the_one_by_one_launches_wrote(store):
    _prepare(store)
    with pytest.raises(_Undo), store.write() as s:
        started, cancelled = _one_by_one(s, 9.0)
        s.flush()
        one_by_one = _dump(s)
        raise _Undo

    launches = []
    for wid, (_, poll, endpoint) in CASES.items():
        steps = lifecycle.launch_steps("fake", _status(wid, poll, endpoint))
        assert steps is not None
        launches.append(Launch(wid, f"ref-{wid}", steps, endpoint))
    with store.write() as s:
        took = LaunchRepo(s).launch(launches[::-1], 9.0)  # (any order given: id order kept)
    with store.read() as s:
        batched = _dump(s)
        states = {wid: WorkloadRepo(s).get(wid).state for wid in CASES}

    assert (took.started, took.cancelled) == (started, cancelled)
    assert took.started == ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5", "w-6"]
    assert took.cancelled == ["w-7", "w-8"]
    assert batched == one_by_one
    assert states["w-0"] is S.STARTING and states["w-1"] is S.RUNNING
    assert states["w-7"] is S.CANCELLED and states["w-8"] is S.PENDING


def test_launch_steps_leave_ended_or_rejected_work_to_apply_status():
    for state in (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST, ExecState.REJECTED):
        assert lifecycle.launch_steps("fake", ExecStatus("w", state)) is None
    assert lifecycle.launch_steps("slurm", None) == ((S.STARTING, "started by the slurm executor"),)


def test_a_workload_that_does_not_exist_writes_nothing(store):
    _prepare(store)
    with store.read() as s:
        before = _dump(s)
    steps = ((S.STARTING, "started by the fake executor"),)
    with pytest.raises(NotFound, match="no workload 'w-zz'"), store.write() as s:
        LaunchRepo(s).launch([Launch("w-0", "r0", steps), Launch("w-zz", "r1", steps)], 9.0)
    with store.read() as s:
        assert _dump(s) == before
