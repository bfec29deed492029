"""A workload whose start fails never blocks the pool (issue 13, item 1): a permanent start
error fails it; a transient one requeues it behind a growing wait (persisted, so a restart
neither resets nor forgets it) and fails it after `start_retry.max_attempts`; one log line
per failure. SQLite and PostgreSQL, the fake executor family, a ManualClock."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

import pytest

from gpupool.domain import Allocation, Quota, Tenant, Workload, WorkloadState
from gpupool.domain.retries import StartRetryPolicy, clock_time
from gpupool.engines.common.executor import Handle
from gpupool.engines.fake.executor import FailingExecutor, FakeExecutor
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.store import AllocationRepo, TenantRepo, WorkloadRepo

S = WorkloadState
LOG = "gpupool.server.loops.scheduler"


def show(world, wid: str) -> dict:
    r = world.get("admin", f"/workloads/{wid}")
    assert r.status_code == 200, r.text
    return r.json()


def stored(world, wid: str) -> Workload:
    with world.ctx.store.read() as s:
        return WorkloadRepo(s).get(wid)


def big_first(world) -> tuple[dict, list[dict]]:
    """A 4-GPU job (all of n1), then three 1-GPU jobs, all in one tenant."""
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("other", Quota.gpus(4, 4)), 0, create=False)
    big = world.submit(role="outsider", gpus=4, command=["echo", "big"])
    small = [world.submit(role="outsider", gpus=1, command=["echo", str(i)]) for i in range(3)]
    return big, small


@pytest.mark.parametrize("permanent", [False, True], ids=["transient", "permanent"])
def test_three_small_jobs_start_behind_a_big_job_that_cannot(world, permanent, caplog):
    world.ctx.executor = FailingExecutor(
        world.clock,
        message="the engine refused it",
        permanent=permanent,
        only=lambda w: w.request.gpus == 4,
    )
    big, small = big_first(world)
    caplog.set_level(logging.INFO, logger=LOG)
    first = world.scheduler.run_once()
    assert first.admitted == [big["id"]] and big["id"] in first.start_failed
    world.scheduler.run_once()
    assert [show(world, w["id"])["state"] for w in small] == ["running"] * 3
    got = show(world, big["id"])
    if permanent:
        assert got["state"] == "failed"
        assert got["reason"] == f"could not start: the engine refused it (workload {big['id']})"
    else:
        assert got["state"] == "pending"
        assert "attempt 1 of 5" in got["reason"] and "retrying after" in got["reason"]
        # its why-pending says it is retrying, and when (10 s after the failure)
        assert got["pending"]["reason"] == got["reason"]
    failures = [r for r in caplog.records if big["id"] in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is None  # one line, no traceback


def test_the_why_pending_of_work_backing_off_says_when_it_retries(world):
    world.ctx.executor = FailingExecutor(world.clock, only=lambda w: w.request.gpus == 4)
    big, small = big_first(world)
    failed_at = world.clock.now()
    world.scheduler.run_once()
    w = stored(world, big["id"])
    assert (w.start_attempts, w.retry_at) == (1, failed_at + 10)
    when = clock_time(failed_at + 10)
    q = world.get("outsider", "/queue").json()
    # it lost its place: the small jobs (not admitted in that cycle) are now ahead of it
    assert [e["workload"]["id"] for e in q] == [w["id"] for w in small] + [big["id"]]
    assert [e["position"] for e in q] == [1, 2, 3, 4]
    assert q[3]["reason"].endswith(f"retrying after {when}")
    # still backing off a second later: the queue keeps saying so, the small jobs run
    world.clock.advance(1)
    report = world.scheduler.run_once()
    assert report.backing_off == [big["id"]]
    q = world.get("outsider", "/queue").json()
    assert q[0]["reason"].endswith(f"retrying after {when}")
    assert q[0]["reason"].startswith("could not start (attempt 1 of 5)")


def test_transient_failures_back_off_doubling_then_fail_after_max_attempts(world, caplog):
    ex = FailingExecutor(world.clock, message="pod quota exceeded")
    world.ctx.executor = ex
    a = world.submit(gpus=1)
    caplog.set_level(logging.INFO, logger=LOG)
    waits = []
    for attempt in range(1, 5):
        t = world.clock.now()
        world.scheduler.run_once()
        w = stored(world, a["id"])
        assert w.state is S.PENDING and w.start_attempts == attempt
        assert w.retry_at is not None
        waits.append(w.retry_at - t)
        # not tried again before retry_at: the executor is not asked
        world.clock.advance(w.retry_at - t - 0.5)
        world.scheduler.run_once()
        assert ex.attempts == attempt
        world.clock.advance(0.5)
    assert waits == [10, 20, 40, 80]
    world.scheduler.run_once()  # the 5th failure in a row: it gives up
    got = show(world, a["id"])
    assert got["state"] == "failed"
    assert got["reason"].startswith("could not start after 5 attempts; giving up: pod quota")
    assert ex.attempts == 5
    with world.ctx.store.read() as s:
        assert AllocationRepo(s).active() == []
    starts = [e for e in got["events"] if e["data"].get("start_failed")]
    assert [e["data"]["attempts"] for e in starts] == [1, 2, 3, 4, 5]
    mine = [r for r in caplog.records if a["id"] in r.getMessage()]
    assert len(mine) == 5 and all(r.exc_info is None for r in mine)
    world.clock.advance(3600)
    world.scheduler.run_once()
    assert ex.attempts == 5  # failed work is never tried again


def test_attempts_and_backoff_survive_a_scheduler_restart(world):
    ex = FailingExecutor(world.clock, failures=2)
    world.ctx.executor = ex
    a = world.submit(gpus=1)
    world.scheduler.run_once()
    world.clock.advance(10)
    world.scheduler.run_once()  # 2nd failure: retry in 20 s
    w = stored(world, a["id"])
    assert w.start_attempts == 2
    fresh = SchedulerLoop(world.ctx)  # a restarted server: nothing in memory
    world.clock.advance(19)
    fresh.run_once()
    assert ex.attempts == 2 and stored(world, a["id"]).state is S.PENDING
    world.clock.advance(1)
    fresh.run_once()
    w = stored(world, a["id"])
    assert w.state is S.RUNNING
    assert (w.start_attempts, w.retry_at) == (0, None)  # a start clears the count


def test_retry_settings_are_honoured(world):
    world.ctx.settings = replace(
        world.ctx.settings, start_retry=StartRetryPolicy(max_attempts=2, backoff_s=3)
    )
    world.ctx.executor = FailingExecutor(world.clock)
    a = world.submit(gpus=1)
    world.scheduler.run_once()
    assert stored(world, a["id"]).retry_at == world.clock.now() + 3
    world.clock.advance(3)
    world.scheduler.run_once()
    assert show(world, a["id"])["state"] == "failed"


class CrashingExecutor(FakeExecutor):
    """An executor with a bug: `start` raises something other than StartError."""

    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        raise ValueError("embedded null byte")


def test_an_executor_crash_is_retried_with_one_traceback_then_one_line_each(world, caplog):
    world.ctx.executor = CrashingExecutor(world.clock)
    a = world.submit(gpus=1)
    caplog.set_level(logging.INFO, logger=LOG)
    for _ in range(5):
        world.scheduler.run_once()
        world.clock.advance(300)
    got = show(world, a["id"])
    assert got["state"] == "failed" and "ValueError: embedded null byte" in got["reason"]
    mine = [r for r in caplog.records if a["id"] in r.getMessage()]
    assert len(mine) == 5
    assert [r.exc_info is not None for r in mine] == [True, False, False, False, False]


class CancelledWhileStarting(FailingExecutor):
    """The owner cancels while the executor is (failing to) start the work."""

    def __init__(self, world):
        super().__init__(world.clock, message="slow engine gave up")
        self.world = world

    def start(self, workload, allocation, *, env=None, unix_user=None):  # noqa: ANN001
        with self.world.ctx.store.write() as s:
            WorkloadRepo(s).request_stop(workload.id, S.CANCELLED, "cancelled by ann", 0.0)
        return super().start(workload, allocation, env=env, unix_user=unix_user)


def test_a_cancel_during_a_failed_start_wins_over_the_retry(world):
    world.ctx.executor = CancelledWhileStarting(world)
    a = world.submit(gpus=1)
    world.scheduler.run_once()
    got = show(world, a["id"])
    assert got["state"] == "cancelled" and got["reason"] == "cancelled by ann"
    with world.ctx.store.read() as s:
        assert AllocationRepo(s).active() == []


def test_work_backing_off_can_be_cancelled(world):
    world.ctx.executor = FailingExecutor(world.clock)
    a = world.submit(gpus=1)
    world.scheduler.run_once()
    assert stored(world, a["id"]).start_attempts == 1
    r = world.delete("member", f"/workloads/{a['id']}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    world.clock.advance(3600)
    world.scheduler.run_once()
    assert world.ctx.executor.attempts == 1
