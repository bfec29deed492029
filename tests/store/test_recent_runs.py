"""The observations of the pool's run-length scale (relative service levels): the last
workloads to start, each with its attained GPU-seconds and whether its run finished
(gpupool.store.attained.recent_runs), against a set computed by hand, on SQLite and
PostgreSQL."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, WorkloadState
from gpupool.store import AllocationRepo, WorkloadRepo, recent_runs
from gpupool.store.attained import _first_starts
from tests.store.test_attained import T0, alloc, attempt
from tests.store.test_store import seed, workload

S = WorkloadState
NOW = T0 + 10_000


def _world(store) -> dict[str, str]:
    """Workloads in the order of their first start (allocation ids); name -> id."""
    seed(store)
    ws = {
        "done": workload(gpus=2),
        "ckpt": workload(gpus=2, checkpointing=True),
        "plain_re": workload(gpus=1),
        "waiting_ckpt": workload(gpus=1, checkpointing=True),
        "cancelled": workload(gpus=1),
        "cancelled_pending": workload(gpus=1, checkpointing=True),
        "failed_start": workload(gpus=1),
        "cpu": workload(gpus=0),
        "running": workload(gpus=2),
    }
    with store.write() as s:
        for w in ws.values():
            WorkloadRepo(s).add(w)
    ids = {k: w.id for k, w in ws.items()}
    attempt(store, ids["done"], T0, T0 + 3600, S.SUCCEEDED)  # 2 GPUs x 1 h: 7,200 GPU-s
    attempt(store, ids["ckpt"], T0 + 100, T0 + 1900, S.PREEMPTED)  # kept: 3,600
    attempt(store, ids["plain_re"], T0 + 200, T0 + 1200, S.PREEMPTED, gpus=(0,))  # restarts
    attempt(store, ids["waiting_ckpt"], T0 + 300, T0 + 1300, S.PREEMPTED, gpus=(0,))  # 1,000
    attempt(store, ids["cancelled"], T0 + 400, T0 + 700, S.CANCELLED, gpus=(0,))  # 300
    attempt(store, ids["cancelled_pending"], T0 + 500, T0 + 1000, S.PREEMPTED, gpus=(0,))
    attempt(store, ids["failed_start"], T0 + 600, T0 + 650, S.PENDING, gpus=(0,))  # never ran
    with store.write() as s:
        repo = WorkloadRepo(s)
        repo.change_state(ids["cancelled_pending"], S.CANCELLED, T0 + 1100, "cancelled")
        repo.change_state(ids["failed_start"], S.FAILED, T0 + 700, "could not start")
        # CPU-only work (no GPU shares): no run of the scale
        AllocationRepo(s).allocate(Allocation(ids["cpu"], "n1", (), T0 + 800))
        repo.change_state(ids["cpu"], S.ADMITTED, T0 + 800, "admitted")
        repo.change_state(ids["cpu"], S.STARTING, T0 + 800, "starting")
        repo.change_state(ids["cpu"], S.RUNNING, T0 + 800, "running")
        repo.change_state(ids["cpu"], S.SUCCEEDED, T0 + 900, "done")
    attempt(store, ids["ckpt"], T0 + 2000, T0 + 2100, S.PENDING)  # a start that did not take
    attempt(store, ids["ckpt"], T0 + 3000, T0 + 3900, S.SUCCEEDED)  # + 2 x 900 = 5,400
    with store.write() as s:  # admitted at T0 + 9,000 and running: 2 GPUs x 1,000 s at NOW
        repo = WorkloadRepo(s)
        AllocationRepo(s).allocate(alloc(ids["running"], T0 + 9000))
        for to in (S.ADMITTED, S.STARTING, S.RUNNING):
            repo.change_state(ids["running"], to, T0 + 9000, str(to))
    return ids


def test_recent_runs_by_hand(store):
    _world(store)
    with store.read() as s:
        got = sorted(recent_runs(s, 5000, NOW))
    want = sorted(
        [
            (7200.0, True),  # succeeded
            (5400.0, True),  # kept 3,600 + its last attempt 1,800 (the failed start: 0)
            (0.0, False),  # no checkpoints, preempted, waiting again: starts over
            (1000.0, False),  # checkpointing, preempted, waiting again: what it kept
            (300.0, True),  # cancelled while it ran: its run ended
            (500.0, False),  # cancelled while waiting after a preemption: censored
            (2000.0, False),  # running: censored at what it has attained by NOW
        ]
    )
    # (pytest.approx compares flat sequences only: the GPU-seconds and the flags apart)
    assert [done for _, done in got] == [done for _, done in want]
    assert [gpu_s for gpu_s, _ in got] == pytest.approx([gpu_s for gpu_s, _ in want])


def test_the_window_is_the_last_workloads_by_first_start(store):
    _world(store)
    with store.read() as s:
        # "ckpt" ran again lately, but it first started second: not among the last two
        assert sorted(recent_runs(s, 2, NOW)) == [(500.0, False), (2000.0, False)]
        assert len(recent_runs(s, 3, NOW)) == 3
        assert recent_runs(s, 0, NOW) == []


def test_the_walk_gives_the_same_window_page_by_page(store):
    ids = _world(store)
    with store.read() as s:
        whole = _first_starts(s, 100)
        assert set(whole) == set(ids.values()) - {ids["failed_start"], ids["cpu"]}
        for page in (1, 2, 3):  # pages of 1 to 3 allocations: the same window
            assert _first_starts(s, 100, page) == whole
            assert _first_starts(s, 3, page) == _first_starts(s, 3)
