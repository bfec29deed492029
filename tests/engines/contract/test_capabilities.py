"""Each capability an executor declares does something: multi-node work runs on every node it
was given (and an executor without it never runs such work in part), a fraction of a GPU
runs with the enforcement and environment the executor tells, attribution names the work of
its containers and processes, run times are the engine's own, prune removes ended work only,
submit checks refuse only what the engine would never run."""

from __future__ import annotations

import time
from typing import cast

import pytest

from gpupool.domain import Allocation, Enforcement, Share
from gpupool.engines.common.executor import (
    ExecState,
    ExecutorError,
    ExecutorWithAttribution,
    ExecutorWithPruning,
    ExecutorWithRunTimes,
    ExecutorWithSharedGPUs,
    ExecutorWithSubmitChecks,
    StartError,
    logs_of,
)
from gpupool.telemetry.containers import CONTAINER_KINDS
from tests.engines.contract.adapter import READY, Behaviour
from tests.engines.contract.caps import has, need

ENDED = (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)


def test_multi_node_work_runs_on_every_node_it_was_given(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("gang")
    if not has(eut, "multi-node"):
        one = eut.allocation(wid)
        there = Share("elsewhere", 0, "GPU-elsewhere-0", 1000, 1024)
        alloc = Allocation(wid, one.node, (*one.shares, there), one.since)
        with pytest.raises(StartError) as refused:
            eut.executor.start(eut.workload(wid, Behaviour(), nodes=2), alloc)
        assert refused.value.permanent
        assert eut.executor.poll(wid).state is ExecState.UNKNOWN
        return
    if len(eut.nodes()) < 2:
        pytest.skip(f"{eut.name} has one node here (the two-node run of scripts/test has two)")
    eut.start(wid, Behaviour(lines=("rank",)), nodes=2)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    where = eut.nodes_of(wid)
    assert where is None or where == set(eut.nodes()[:2])


def test_a_fraction_of_a_gpu_runs_with_the_enforcement_and_environment_told(engine_under_test):
    eut = engine_under_test
    need(eut, "shared GPUs")
    ex = cast(ExecutorWithSharedGPUs, eut.executor)
    wid = eut.id("fraction")
    (share,) = eut.allocation(wid, milli=250).shares
    assert isinstance(ex.mps_enforcement(share.gpu_uuid), Enforcement)
    mps_env = dict(ex.mps_env(share))
    handle = eut.start(wid, Behaviour(show=("GPUPOOL_WORKLOAD_ID", *sorted(mps_env))), milli=250)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    told = ex.enforcement_of(wid)
    if told is not None:
        assert set(told) == {share.gpu_uuid}
        assert all(isinstance(e, Enforcement) for e in told.values())
        assert not handle.enforcement or dict(handle.enforcement) == dict(told)
    reached = eut.reached_work(wid)
    assert reached["GPUPOOL_WORKLOAD_ID"] == wid
    assert {n: reached[n] for n in mps_env} == mps_env


def test_attribution_names_the_work_of_its_containers_and_processes(engine_under_test):
    eut = engine_under_test
    need(eut, "attribution")
    ex = cast(ExecutorWithAttribution, eut.executor)
    wid = eut.id("owned")
    eut.start(wid, Behaviour(until="release"))
    eut.wait_ready(wid)
    found, pids = eut.containers(wid), eut.pids(wid)
    assert found or pids, f"{eut.name}: nothing the hosts observe leads to the work"
    if found:
        kind, ids = found
        assert ids and dict(ex.owners(kind, ids)) == dict.fromkeys(ids, wid)
        assert ex.owners(kind, ["not-a-container"]).get("not-a-container") is None
        for other in CONTAINER_KINDS:
            if other.name != kind:
                assert not ex.owners(other.name, ids), f"{kind} ids answered as {other.name}"
    if pids:
        mapped = ex.process_map()
        assert {p: mapped.get(p) for p in pids} == dict.fromkeys(pids, wid)
    eut.release(wid)
    eut.settle(wid, *ENDED)


def test_run_times_are_the_engines_own(engine_under_test):
    eut = engine_under_test
    need(eut, "run times")
    wid = eut.id("timed")
    eut.start(wid, Behaviour())
    eut.settle(wid, *ENDED)
    times = cast(ExecutorWithRunTimes, eut.executor).run_times(wid)
    assert times is not None
    start, end = times
    assert start is not None and end is not None and start <= end


def test_prune_removes_the_state_and_logs_of_ended_work_only(engine_under_test):
    eut = engine_under_test
    need(eut, "pruning", "logs")
    ended, live = eut.id("old"), eut.id("live")
    eut.start(ended, Behaviour(lines=("old output",)))
    eut.settle(ended, *ENDED)
    eut.start(live, Behaviour(until="release"), first=1)
    eut.wait_ready(live)
    later = max(time.time(), eut.clock.now()) + 30 * 86400
    removed = cast(ExecutorWithPruning, eut.executor).prune(3600, now=later)
    assert ended in removed and live not in removed
    try:
        left = b"".join(logs_of(eut.executor).log_chunks(ended))
    except ExecutorError:
        left = b""
    assert left == b""
    assert eut.executor.poll(live).state is ExecState.RUNNING
    assert READY in eut.logs(live)
    eut.release(live)
    eut.settle(live, *ENDED)


def test_submit_checks_refuse_only_what_the_engine_would_never_run(engine_under_test):
    eut = engine_under_test
    need(eut, "submit checks")
    ex = cast(ExecutorWithSubmitChecks, eut.executor)
    wid = eut.id("checked")
    assert ex.refusal(eut.workload(wid, Behaviour())) is None
    templates = eut.templates()
    if templates is not None:
        good, bad = templates
        assert ex.template_problem(good, "ann") is None
        problem = ex.template_problem(bad, "ann")
        assert problem is not None and problem.message and problem.field
    eut.start(wid, Behaviour())  # what it does not refuse, it runs
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
