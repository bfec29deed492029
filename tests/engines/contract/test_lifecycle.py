"""The contract's core, for every engine: start returns at once, poll follows the work to its
real end and exit code, UNKNOWN for work never seen, stop with its grace (the polite signal
first, the forced end after the grace on the injected clock), stops of unknown or finished
work change nothing, and REJECTED then requeued where the engine can give up on work."""

from __future__ import annotations

import pytest

from gpupool.engines.common.executor import ExecState
from tests.engines.contract.adapter import GOT_TERM, Behaviour, EngineUnderTest
from tests.engines.contract.caps import need

ALIVE = (ExecState.STARTING, ExecState.RUNNING)
ENDED = (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)


def _running_ids(eut: EngineUnderTest) -> set[str]:
    return {p.workload_id for p in eut.executor.list_running()}


def test_work_never_seen_is_unknown_and_stopping_it_changes_nothing(engine_under_test):
    eut = engine_under_test
    ex, wid = eut.executor, eut.id("never")
    assert ex.poll(wid).state is ExecState.UNKNOWN
    ex.stop(wid, "cancelled", grace_s=0)
    eut.clock.advance(60)
    ex.tick()
    assert ex.poll(wid).state is ExecState.UNKNOWN
    assert wid not in _running_ids(eut)


def test_start_returns_while_the_work_runs_and_poll_follows_it_to_exit_0(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("ok")
    handle = eut.start(wid, Behaviour(until="release"))
    assert (handle.workload_id, handle.executor) == (wid, eut.executor.name) and handle.ref
    assert eut.executor.poll(wid).state in ALIVE  # start did not wait for the work
    eut.wait_ready(wid)
    eut.settle(wid, ExecState.RUNNING)  # a cluster's snapshot of its queue may lag a pass
    assert wid in _running_ids(eut)
    eut.release(wid)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code, st.stop_reason) == (ExecState.SUCCEEDED, 0, None)
    assert wid not in _running_ids(eut)


def test_failed_work_keeps_its_exit_code(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("bad")
    eut.start(wid, Behaviour(exit_code=3))
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.FAILED, 3)


def test_stop_sends_the_polite_signal_first(engine_under_test):
    """Work that traps the polite signal ends on its own, with its own exit code 0, before
    any grace passed (the clock never moves)."""
    eut = engine_under_test
    need(eut)
    wid = eut.id("polite")
    eut.start(wid, Behaviour(on_term="exit0", until="stopped"))
    eut.wait_ready(wid)
    eut.executor.stop(wid, "cancelled", grace_s=30)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code, st.stop_reason) == (ExecState.SUCCEEDED, 0, "cancelled")
    assert GOT_TERM in eut.logs(wid)


def test_stop_forces_the_end_once_the_grace_passed_on_the_clock(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("stubborn")
    eut.start(wid, Behaviour(on_term="ignore", until="stopped"))
    eut.wait_ready(wid)
    eut.executor.stop(wid, "preempted", grace_s=10)
    for _ in range(3):  # the polite signal is ignored; the grace has not passed
        eut.progress()
        eut.executor.tick()
    st = eut.executor.poll(wid)
    assert (st.state, st.stop_reason) == (ExecState.RUNNING, "preempted")
    eut.clock.advance(11)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code, st.stop_reason) == (ExecState.FAILED, 137, "preempted")
    assert wid not in _running_ids(eut)


def test_stopping_finished_work_changes_nothing(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("done")
    eut.start(wid, Behaviour())
    before = eut.settle(wid, *ENDED)
    assert (before.state, before.exit_code) == (ExecState.SUCCEEDED, 0)
    eut.executor.stop(wid, "too late", grace_s=0)
    eut.clock.advance(60)
    eut.executor.tick()
    assert eut.executor.poll(wid) == before


def test_work_the_engine_gives_up_on_is_rejected_and_runs_when_requeued(engine_under_test):
    """Work the engine keeps waiting past its limit is REJECTED with the engine's reason;
    nothing of it runs any more, and the requeued workload's next start runs normally."""
    eut = engine_under_test
    need(eut)
    if eut.cannot_reject:
        pytest.skip(f"the {eut.name} engine: {eut.cannot_reject}")
    wid = eut.id("stuck")
    eut.stick()
    try:
        eut.start(wid, Behaviour())
        eut.progress()
        eut.executor.tick()
        assert eut.executor.poll(wid).state is ExecState.STARTING
        eut.clock.advance(31)  # both engines give up after 30 s (their default)
        st = eut.settle(wid, ExecState.REJECTED, *ENDED)
        assert st.state is ExecState.REJECTED and st.message
        assert wid not in _running_ids(eut)
    finally:
        eut.unstick()
    eut.start(wid, Behaviour(lines=("second start",)))
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    assert "second start" in eut.logs(wid)
