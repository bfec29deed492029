"""The classification's diff in O(changes) (`Queues._appended`: the last cycle's pending work,
less what left it, with new work appended) against the diff by identity of every workload
(`_identity_diff`): the same decisions and the same kept classification, cycle after cycle;
and `_appended` is taken where the caller plays its part as the server does."""

from __future__ import annotations

import dataclasses
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from gpupool.scheduler import SchedulerConfig, Snapshot, cycle
from gpupool.scheduler.cache import SchedulerCache, _diff
from gpupool.scheduler.queues import Queues
from tests.scheduler.builders import apply, job, node, snapshot, tenant, tree
from tests.scheduler.test_cache import CONFIGS, SETTINGS, change, change_pending
from tests.scheduler.test_properties import scenarios

#: what may happen between two cycles: "apply" alone is the server's part (admitted work
#: runs, unschedulable work leaves, preempted work is appended); the others break it
STEPS = st.sampled_from(
    [
        "apply",
        "apply",
        "apply",
        "submit",
        "submit",
        "finish",
        "node_down",
        "pending_copies",
        "pending_reversed",
        "pending_twice",
        "pending_running",
        "attained",
        "cancel",
        "swap",
        "copy_one",
        "keep_unschedulable",
        "admitted_waits",
    ]
)


def _standing(cache: SchedulerCache) -> tuple:
    """What the classification keeps for the next cycle, in its order."""
    c = cache._classified
    if c is None:
        return ()
    s = c.standing
    return (
        list(s.objs.items()),
        sorted(s.wids.items()),
        sorted(s.queues.items()),
        sorted(s.demand.items()),
        sorted(s.adjusted),
        list(s.sched.items()),
        list(s.unsched.items()),
    )


def _next(snap: Snapshot, pending: list, d, what: str, k: int, now: float):
    """The next cycle's inputs: the decisions applied, then the change `what`."""
    before = list(pending)
    snap, pending = apply(snap, pending, d, now)
    if what == "keep_unschedulable":  # unschedulable work left pending, where it was
        failed = set(d.unschedulable)
        pending = [w for w in before if w.id in failed or w in pending] + [
            w for w in pending if w not in before
        ]
    elif what == "admitted_waits" and d.admissions:  # its start failed: it waits again
        wid = d.admissions[k % len(d.admissions)].workload_id
        snap = dataclasses.replace(
            snap, running=tuple(rw for rw in snap.running if rw.workload.id != wid)
        )
        pending = [w for w in before if w.id == wid or w in pending] + [
            w for w in pending if w not in before
        ]
    elif what == "cancel" and pending:
        del pending[k % len(pending)]
    elif what == "swap" and len(pending) > 1:
        i = k % (len(pending) - 1)
        pending[i], pending[i + 1] = pending[i + 1], pending[i]
    elif what == "copy_one" and pending:  # an equal, new object in its place
        i = k % len(pending)
        pending[i] = dataclasses.replace(pending[i])
    elif what == "submit":  # appended, as the server and the simulator do
        t = [x.name for x in snap.tenants if snap.tenants.is_leaf(x.name)]
        pending.append(job(f"s{k}-{now:.0f}", tenant=t[k % len(t)], gpus=1 + k % 2, submit=now))
    else:
        snap = change(snap, what, k)
        snap, pending = change_pending(snap, pending, what, k, now)
    return snap, pending


@SETTINGS
@given(scenarios(), CONFIGS, st.lists(st.tuples(STEPS, st.integers(0, 20)), max_size=8))
def test_the_diff_of_appended_work_equals_the_diff_by_identity(scenario, config, steps):
    """Cache `fast` takes `_appended` where it can, cache `slow` never: their decisions and
    what they keep are the same, and those of no cache; `_appended` is taken after each step
    that only applies the decisions or appends work."""
    snap, pending = scenario
    fast, slow = SchedulerCache(), SchedulerCache()
    now = 0.0
    taken: list[bool] = []
    real = Queues._appended

    def spy(self: Queues, st_, p):  # type: ignore[no-untyped-def]
        out = real(self, st_, p)
        taken.append(out is not None)
        return out

    prev = "apply"
    rebuilds = 1  # (the first cycle builds the capacity index)
    for what, k in [*steps, ("apply", 0)]:
        with mock.patch.object(Queues, "_appended", spy):
            d = cycle(snap, pending, now, config, fast)
        with mock.patch.object(Queues, "_appended", lambda self, st_, p: None):
            d_slow = cycle(snap, pending, now, config, slow)
        fresh = cycle(snap, pending, now, config)
        assert d == d_slow == fresh, f"differs after {prev}"
        assert list(d.unschedulable) == list(fresh.unschedulable)
        assert list(d.pending) == list(fresh.pending)
        assert _standing(fast) == _standing(slow), f"kept differently after {prev}"
        if prev in ("apply", "submit"):
            assert taken[-1], f"_appended not taken after {prev}"
            assert fast.stats.rebuilds == rebuilds, f"capacity rebuilt after {prev}"
        rebuilds = fast.stats.rebuilds
        snap, pending = _next(snap, pending, d, what, k, now)
        prev = what
        now += 100.0


@SETTINGS
@given(scenarios(), CONFIGS, st.lists(st.tuples(STEPS, st.integers(0, 20)), max_size=6))
def test_filing_schedulable_work_at_once_equals_filing_it_one_by_one(scenario, config, steps):
    """`Queues._file_schedulable` (all new work schedulable: C-level passes) against
    `_file_each` (one by one): the same decisions and the same kept classification, with
    attained service re-keying work (LAS, levels)."""
    snap, pending = scenario
    at_once, one_by_one = SchedulerCache(), SchedulerCache()
    now = 0.0
    for what, k in [*steps, ("apply", 0)]:
        d = cycle(snap, pending, now, config, at_once)
        with mock.patch.object(Queues, "_file_schedulable", Queues._file_each):
            d_each = cycle(snap, pending, now, config, one_by_one)
        assert d == d_each, f"differs before {what}"
        assert list(d.pending) == list(d_each.pending)
        assert _standing(at_once) == _standing(one_by_one)
        snap, pending = _next(snap, pending, d, what, k, now)
        if pending and k % 3 == 0:  # some pending work with attained service
            wid = pending[k % len(pending)].id
            service = {**snap.attained_service, wid: 3600.0 * (1 + k)}
            snap = dataclasses.replace(snap, attained_service=service)
        now += 100.0


def test_work_that_left_pending_another_way_takes_the_diff_by_identity():
    """Work that left the queue though it was neither admitted, started nor unschedulable
    (cancelled) breaks `_appended`'s expectation: the diff by identity then gives the same."""
    snap = snapshot([node("n0", gpus=1)], tree(tenant("t", 1), tenant("u", 1)))
    pending = [job(f"w{i}", tenant="tu"[i % 2], gpus=1, submit=i) for i in range(6)]
    cache = SchedulerCache()
    config = SchedulerConfig()
    d = cycle(snap, pending, 0.0, config, cache)
    snap, pending = apply(snap, pending, d, 0.0)
    del pending[2]  # cancelled
    real = Queues._appended
    taken: list[bool] = []

    def spy(self: Queues, st_, p):  # type: ignore[no-untyped-def]
        out = real(self, st_, p)
        taken.append(out is not None)
        return out

    with mock.patch.object(Queues, "_appended", spy):
        d = cycle(snap, pending, 100.0, config, cache)
    assert taken == [False]
    assert d == cycle(snap, pending, 100.0, config)


def test_started_lists_the_last_cycles_admissions_and_new_running_work():
    snap = snapshot([node("n0", gpus=2)], tree(tenant("t", 2)))
    pending = [job(f"w{i}", tenant="t", gpus=1, submit=i) for i in range(3)]
    cache = SchedulerCache()
    d = cycle(snap, pending, 0.0, SchedulerConfig(), cache)
    assert cache.started(cache.calls - 1) is None  # the first call built the index
    seen = cache.calls
    snap, pending = apply(snap, pending, d, 0.0)
    snap = dataclasses.replace(snap, running=snap.running[:1])  # one of them ended already
    cycle(snap, pending, 100.0, SchedulerConfig(), cache)
    admitted = [a.workload_id for a in d.admissions]
    assert sorted(set(cache.started(seen) or ())) == sorted(admitted) == ["w0", "w1"]
    assert cache.started(seen - 1) is None  # a call in between: not known


def test_unschedulable_work_kept_pending_in_another_order_is_listed_in_the_new_order():
    """The diff by identity puts what it keeps in the order of `pending` (that `_appended`
    then relies on): unschedulable work left pending and listed in reverse is answered in
    the new order, as without a cache."""
    snap = snapshot([node("n0", gpus=1)], tree(tenant("t", 1)))
    lost = [job(f"x{i}", tenant="nobody", gpus=1, submit=i) for i in range(3)]
    pending = [*lost, *(job(f"w{i}", tenant="t", gpus=1, submit=i) for i in range(3))]
    cache = SchedulerCache()
    config = SchedulerConfig()
    d = cycle(snap, pending, 0.0, config, cache)
    assert list(d.unschedulable) == ["x0", "x1", "x2"]
    snap, _ = apply(snap, pending, d, 0.0)
    admitted = {a.workload_id for a in d.admissions}
    pending = [w for w in pending if w.id not in admitted][::-1]
    d = cycle(snap, pending, 100.0, config, cache)
    fresh = cycle(snap, pending, 100.0, config)
    assert d == fresh
    assert list(d.unschedulable) == list(fresh.unschedulable) == ["x2", "x1", "x0"]
    assert list(d.pending) == list(fresh.pending)


@given(st.integers(0, 40), st.data())
def test_the_running_diff_keeps_what_runs_in_order_and_finds_the_rest(n, data):
    """`cache._diff`: the work of the last call still listed first in the same order is
    kept, the rest of it is gone, the rest of `running` new: what is kept followed by what is
    new is `running`, whatever its order (work listed in another order is gone and new)."""
    before = [object() for _ in range(n)]
    prev = {id(o): o for o in before}
    stays = [o for o in before if data.draw(st.booleans())]
    running = stays + [object() for _ in range(data.draw(st.integers(0, 5)))]
    if data.draw(st.booleans()):
        running = data.draw(st.permutations(running))
    gone, new = _diff(prev, tuple(running))  # type: ignore[arg-type]
    gone_ids = set(map(id, gone))
    kept = [o for o in before if id(o) not in gone_ids]
    assert [*kept, *new] == running
    assert all(id(o) in prev for o in gone)
    if running[: len(stays)] == stays:  # in order: only what ended is gone
        assert new == running[len(stays) :]
        assert len(gone) == n - len(stays)
