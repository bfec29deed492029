"""The fake executor family follows the executor contract."""

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Share, Workload
from gpupool.engines.common.executor import ExecState, NotSupported, StartError
from gpupool.engines.fake.executor import (
    FailingExecutor,
    FakeExecutor,
    NeverStarts,
    SlowExecutor,
)


def _wl(i: str = "w1") -> Workload:
    return Workload(id=i, tenant="lab-a", owner="alice", command=("python", "train.py"))


def _alloc(i: str = "w1") -> Allocation:
    return Allocation(i, "n1", (Share("n1", 0, "GPU-aaa", 1000, 81920),), since=0.0)


def test_start_runs_and_finish_gives_exit_code():
    clock = ManualClock(100)
    ex = FakeExecutor(clock)
    h = ex.start(_wl(), _alloc())
    assert h.workload_id == "w1" and h.started_at == 100
    assert ex.process("w1").env["CUDA_VISIBLE_DEVICES"] == "GPU-aaa"
    assert ex.poll("w1").state is ExecState.RUNNING
    clock.advance(5)
    ex.finish("w1", 3)
    st = ex.poll("w1")
    assert (st.state, st.exit_code, st.finished_at) == (ExecState.FAILED, 3, 105)
    assert ex.list_running() == []


def test_unknown_workload_and_duplicate_start():
    ex = FakeExecutor(ManualClock())
    assert ex.poll("nope").state is ExecState.UNKNOWN
    ex.start(_wl(), None)
    with pytest.raises(StartError, match="already running"):
        ex.start(_wl(), None)
    assert ex.launches_of("w1") == 1


def test_stop_polite_and_forced_by_clock():
    clock = ManualClock()
    ex = FakeExecutor(clock, ignores_term=True)
    ex.start(_wl(), None)
    ex.stop("w1", "cancelled by alice", grace_s=30)
    assert ex.poll("w1").state is ExecState.RUNNING
    assert ex.poll("w1").stop_reason == "cancelled by alice"
    clock.advance(29)
    ex.tick()
    assert ex.poll("w1").state is ExecState.RUNNING
    clock.advance(1)
    ex.tick()
    st = ex.poll("w1")
    assert st.state is ExecState.FAILED and st.exit_code == 137
    ex.stop("w1", "again")  # no-op on finished work


def test_reborn_sees_same_world():
    ex = FakeExecutor(ManualClock())
    ex.start(_wl("a"), None)
    ex.start(_wl("b"), None)
    ex.finish("b", 0)
    ex2 = ex.reborn()
    assert [r.workload_id for r in ex2.list_running()] == ["a"]
    assert ex2.poll("b").state is ExecState.SUCCEEDED


def test_slow_never_failing():
    clock = ManualClock()
    slow = SlowExecutor(clock)
    slow.start(_wl(), None)
    assert slow.poll("w1").state is ExecState.STARTING
    slow.release("w1")
    assert slow.poll("w1").state is ExecState.RUNNING
    never = NeverStarts(clock)
    never.start(_wl(), None)
    never.set_running("w1")
    assert never.poll("w1").state is ExecState.STARTING
    failing = FailingExecutor(clock, failures=1)
    with pytest.raises(StartError):
        failing.start(_wl(), None)
    failing.start(_wl(), None)
    assert failing.attempts == 2


def test_logs_capability():
    ex = FakeExecutor(ManualClock())
    ex.start(_wl(), None)
    ex.write_log("w1", "a\nb\nc\n")
    assert ex.logs("w1", tail=2) == "b\nc\n"


def test_the_base_has_no_capability_and_the_fake_declares_its_own():
    """An executor that implements only the four required methods has none of the capability
    mixins (callers check them with isinstance); the fake declares those it scripts."""
    from gpupool.domain import Enforcement, Share
    from gpupool.engines.common.executor import (
        CAPABILITIES,
        Executor,
        ExecutorWithMultiNode,
        logs_of,
    )
    from gpupool.engines.fake.executor import OneNodeExecutor

    class Bare(Executor):
        def start(self, workload, allocation, *, env=None, unix_user=None):
            raise NotImplementedError

        def poll(self, workload_id):
            raise NotImplementedError

        def stop(self, workload_id, reason, grace_s=30.0):
            return None

        def list_running(self):
            return []

    bare = Bare()
    assert not any(isinstance(bare, cap) for cap in CAPABILITIES)
    with pytest.raises(NotSupported, match="does not keep logs"):
        logs_of(bare)  # what the API turns into its 404
    assert bare.tick() is None and bare.close() is None  # no-op defaults of the base
    fake = FakeExecutor(ManualClock())
    assert {c.__name__ for c in CAPABILITIES if isinstance(fake, c)} == {
        "ExecutorWithLogs",
        "ExecutorWithAdoption",
        "ExecutorWithMultiNode",
        "ExecutorWithSharedGPUs",
        "ExecutorWithAttribution",
        "ExecutorWithRunTimes",
        "ExecutorWithNodePools",
    }
    assert not isinstance(OneNodeExecutor(ManualClock()), ExecutorWithMultiNode)
    assert fake.mps_enforcement("GPU-1") is Enforcement.POLICED  # the mixin's defaults
    assert fake.mps_env(Share("n", 0, "GPU-1", 500, 1024, Enforcement.MPS)) == {}
    assert fake.process_map() == {} and fake.container_names("pod", ["x"]) == {}
