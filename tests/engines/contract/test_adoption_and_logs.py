"""Adoption after a restart (`ExecutorWithAdoption`) and logs (`ExecutorWithLogs`), for every
engine that declares them: work one executor started is found by a fresh `open` over the same
state and polls to its real end without running twice; output reads from an offset and from
the end."""

from __future__ import annotations

from gpupool.engines.common.executor import ExecState, logs_of
from tests.engines.contract.adapter import READY, Behaviour
from tests.engines.contract.caps import need

ENDED = (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)


def test_running_work_is_adopted_after_a_restart_and_polls_to_its_real_end(engine_under_test):
    eut = engine_under_test
    need(eut, "adoption")
    wid = eut.id("adopted")
    eut.start(wid, Behaviour(exit_code=3, until="release"))
    eut.wait_ready(wid)
    ex = eut.restart()  # gpupool up restarted: the new executor knows nothing yet
    assert wid in {p.workload_id for p in ex.list_running()}
    assert ex.poll(wid).state is ExecState.RUNNING
    eut.release(wid)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.FAILED, 3)
    assert wid not in {p.workload_id for p in ex.list_running()}
    assert eut.logs(wid).count(READY) == 1  # it ran once: nothing launched it again


def test_work_that_ends_across_a_restart_keeps_its_exit_code(engine_under_test):
    eut = engine_under_test
    need(eut, "adoption")
    wid = eut.id("ended")
    eut.start(wid, Behaviour(exit_code=5))
    eut.restart()
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.FAILED, 5)


def test_output_reads_from_an_offset_and_from_the_end(engine_under_test):
    eut = engine_under_test
    need(eut, "logs")
    wid = eut.id("logs")
    eut.start(wid, Behaviour(lines=("one", "two", "three")))
    eut.settle(wid, *ENDED)
    logs = logs_of(eut.executor)
    whole = b"".join(logs.log_chunks(wid))
    assert b"one\ntwo\nthree\n" in whole
    at = whole.index(b"two\n")
    assert b"".join(logs.log_chunks(wid, at)) == whole[at:]
    assert b"".join(logs.log_chunks(wid, len(whole))) == b""
    assert logs.log_tail(wid, 2) == f"three\n{READY}\n".encode()
    assert logs.logs(wid, tail=1) == f"{READY}\n"
