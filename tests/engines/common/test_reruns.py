"""A preempted and requeued job keeps its earlier run's output (issue 30 item 4): each new
run of the same workload is appended to its log after one separator line, in the local
executor (real processes) and in the fake one the server tests use."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Workload
from gpupool.engines.common import reruns
from gpupool.engines.common.executor import ExecState
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.engines.local.executor import LocalExecutor
from tests.engines.conftest import end_all, mkfifo, wait_job, wait_ready

# 2026-01-05 03:52:00 UTC and 04:05:00 UTC
T_STOP, T_RERUN = 1767585120.0, 1767585900.0


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = LocalExecutor(
        tmp_path / "jobs", clock=ManualClock(T_STOP - 60), user_mode="single-user"
    )
    yield executor
    end_all(executor)


def test_a_rerun_after_preemption_keeps_the_first_runs_output(ex, job_tmp):
    fifo = mkfifo(job_tmp / "ready")
    w = Workload(
        id="w1",
        tenant="lab-a",
        owner="alice",
        command=("sh", "-c", f'echo "run $RUN_NO" ; echo up > {fifo}; sleep 60'),
    )
    ex.start(w, None, env={"RUN_NO": "1"})
    wait_ready(fifo)
    ex.clock.set(T_STOP)  # type: ignore[attr-defined]
    ex.stop("w1", "preempted for lab-b", grace_s=0)
    wait_job(ex, "w1")
    assert ex.poll("w1").state is ExecState.FAILED
    assert ex.logs("w1") == "run 1\n"

    ex.clock.set(T_RERUN)  # type: ignore[attr-defined]
    again = dataclasses.replace(w, preemptions=1, command=("sh", "-c", 'echo "run $RUN_NO"'))
    ex.start(again, None, env={"RUN_NO": "2"})
    wait_job(ex, "w1")
    assert ex.poll("w1").state is ExecState.SUCCEEDED
    assert ex.logs("w1") == (
        "run 1\n--- requeued after preemption at 03:52 UTC; run 2 starts at 04:05 UTC ---\nrun 2\n"
    )
    assert ex.logs("w1", tail=2).startswith("--- requeued after preemption")


def test_the_first_run_has_no_separator_and_a_cut_line_is_ended(tmp_path):
    log = tmp_path / "out.log"
    reruns.mark_new_run_at(log, b"--- x ---\n")  # no log yet: nothing
    assert not log.exists()
    log.write_bytes(b"")
    reruns.mark_new_run_at(log, b"--- x ---\n")  # an empty log: the first run
    assert log.read_bytes() == b""
    log.write_bytes(b"progress 50%")  # killed mid-line
    reruns.mark_new_run_at(log, b"--- x ---\n")
    assert log.read_bytes() == b"progress 50%\n--- x ---\n"


def test_the_fake_executor_keeps_earlier_runs_too():
    clock = ManualClock(T_STOP - 60)
    ex = FakeExecutor(clock)
    w = Workload(id="w1", tenant="lab-a", owner="alice", command=("train",))
    ex.start(w, None)
    ex.write_log("w1", "epoch 1\n")
    clock.set(T_STOP)
    ex.stop("w1", "preempted", grace_s=0)
    clock.set(T_RERUN)
    ex.start(dataclasses.replace(w, preemptions=1), None)
    ex.write_log("w1", "epoch 2\n")
    assert ex.logs("w1") == (
        "epoch 1\n--- requeued after preemption at 03:52 UTC; run 2 starts at 04:05 UTC ---\n"
        "epoch 2\n"
    )
