"""Regression tests for replay defects found by an outside replay (issue #20)."""

from __future__ import annotations

import importlib
import random

import pytest

from gpupool.domain import WorkloadState
from gpupool.sim import engine
from gpupool.sim.metrics import to_json

from .builders import job, node, run, scenario, tenant

#: where the cycle builds its Reclaimer (gpupool.scheduler.cycle_reclaim.Preemptors)
reclaim_module = importlib.import_module("gpupool.scheduler.cycle_reclaim")

S = WorkloadState


def test_a_pending_window_does_not_starve_work_arriving_at_one_instant():
    # 200 one-GPU jobs at t=0 on 80 GPUs, nothing ends during the replay: with a window of 8
    # per tenant only the first 8 were ever placed (no later event moved the window)
    data = scenario(
        nodes=[node("n", count=10, gpus=8)],
        workloads=[job("j", count=200, duration=10**7)],
        pending_window=8,
    )
    r = run(data)
    started_at_0 = [rec for rec in r.records.values() if rec.first_start == 0.0]
    assert len(started_at_0) == 80
    assert r.allocation_ratio_at_last_submit == 1.0


def test_allocation_ratio_counts_every_cycle_at_the_last_submission():
    # a cap of 10 admissions per cycle: the follow-up cycles at t=0 place the rest; the
    # ratio read 10/40 after the first cycle only
    data = scenario(
        nodes=[node("n", count=5, gpus=8)],
        workloads=[job("j", count=40, duration=10**6)],
        max_admissions_per_cycle=10,
    )
    r = run(data)
    assert r.allocation_ratio_at_last_submit == 1.0
    assert to_json(r)["metrics"]["allocation_ratio"] == 1.0


def test_the_allocation_ratio_stops_at_the_first_completion_after_the_last_submission():
    data = scenario(
        nodes=[node("n", gpus=4)],
        workloads=[job("short", duration=10), job("long", duration=100)],
        cycle_interval_s=0,
    )
    r = run(data)
    assert r.allocation_ratio_at_last_submit == 0.5  # not 0.25 after "short" ended


def test_follow_up_cycles_at_one_instant_run_at_once():
    # 80 jobs, at most 5 admissions per cycle: 16 cycles, all at t=0 (they ran 10 s apart
    # after the fifth)
    data = scenario(
        nodes=[node("n", count=10, gpus=8)],
        workloads=[job("j", count=80, duration=1000)],
        max_admissions_per_cycle=5,
        cycle_interval_s=10,
    )
    r = run(data)
    assert {rec.first_start for rec in r.records.values()} == {0.0}
    assert len(r.cycle_ms) >= 16


def test_too_many_cycles_at_one_instant_stop_the_replay(monkeypatch):
    # the guard against a scheduler that never converges (lowered here: 100 cycles at t=0)
    monkeypatch.setattr(engine, "_MAX_SAME_INSTANT_CYCLES", 50)
    data = scenario(
        nodes=[node("n", count=13, gpus=8)],
        workloads=[job("j", count=100, duration=10)],
        max_admissions_per_cycle=1,
    )
    with pytest.raises(engine.SimulationError, match="does not converge"):
        run(data)


def _single_tenant(guaranteed: float) -> dict:
    rnd = random.Random(1)
    work = [
        job(f"j{i}", submit=rnd.uniform(0, 4000), duration=rnd.uniform(100, 2000))
        for i in range(300)
    ]
    return scenario(
        nodes=[node("n", count=2, gpus=4)],
        tenants=[tenant("a", guaranteed_gpus=guaranteed)],
        workloads=work,
    )


def test_a_guarantee_nobody_can_reclaim_for_adds_no_cycles_and_changes_nothing():
    # one tenant, guaranteed more than the cluster: it is always "below its guarantee", but
    # there is nobody to reclaim from, so time alone changes nothing (955 cycles vs 300)
    plain = run(_single_tenant(0))
    guaranteed = run(_single_tenant(16))
    assert len(guaranteed.cycle_ms) == len(plain.cycle_ms) == 300
    a, b = to_json(plain), to_json(guaranteed)
    assert a["workloads"] == b["workloads"]


def test_no_reclaim_index_is_built_when_nobody_borrows(monkeypatch):
    # the 7x slower replay: a Reclaimer (all running work sorted) was built in every cycle
    # for a guaranteed tenant whose work did not fit, though no other tenant borrowed
    built = []
    real = reclaim_module.Reclaimer

    def spy(*args, **kw):
        built.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(reclaim_module, "Reclaimer", spy)
    plain = run(_single_tenant(0))
    guaranteed = run(_single_tenant(16))
    assert built == []
    assert to_json(plain)["workloads"] == to_json(guaranteed)["workloads"]


def test_a_reclaim_still_happens_when_another_tenant_borrows():
    data = scenario(
        nodes=[node("n", gpus=4)],
        tenants=[tenant("a", guaranteed_gpus=4), tenant("b")],
        workloads=[
            job("b1", tenant="b", gpus=4, duration=10**5),
            job("a1", tenant="a", submit=400, gpus=2, duration=100),
        ],
    )
    r = run(data)
    assert r.preemptions == 1
    assert r.records["a1"].state is S.SUCCEEDED
