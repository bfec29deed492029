"""Start-time forecasts (issue 35 part 1): the forward run of the pure scheduler from a live
state (gpupool.sim.forecast) and the run-time estimates it rests on (gpupool.sim.runtimes)."""

from __future__ import annotations

import dataclasses

from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    Node,
    Quota,
    Request,
    Share,
    Tenant,
    TenantTree,
    Workload,
    WorkloadKind,
    WorkloadState,
)
from gpupool.scheduler import RunningWorkload, SchedulerConfig, Snapshot
from gpupool.sim.forecast import CapacityHold, ForecastLimits, forecast, forecast_text
from gpupool.sim.runtimes import PastRun, RuntimeEstimator

NOW = 1_000_000.0
NODES = (Node("n1", tuple(GPU(i, f"u{i}", "H100", 81920) for i in range(2)), 64000, 512000),)
TREE = TenantTree([Tenant("a", Quota.gpus(1, 2)), Tenant("b", Quota.gpus(1, 2))])


def running(wid: str, tenant: str, gpu: int, ran_s: float, max_runtime_s=None, owner="ann"):
    w = Workload(
        wid,
        tenant,
        owner,
        Request(gpus=1),
        state=WorkloadState.RUNNING,
        started_at=NOW - ran_s,
        max_runtime_s=max_runtime_s,
    )
    share = Share("n1", gpu, f"u{gpu}", 1000, 81920, Enforcement.POLICED)
    return RunningWorkload(w, Allocation(wid, "n1", (share,), since=NOW - ran_s))


def job(wid: str, tenant: str, gpus: int = 1, owner: str = "ann", **kw) -> Workload:
    return Workload(wid, tenant, owner, Request(gpus=gpus), submitted_at=NOW - 10, **kw)


def runs(owner: str, tenant: str, *seconds: float, gpu_milli: int = 1000) -> list[PastRun]:
    return [PastRun(owner, tenant, WorkloadKind.JOB, gpu_milli, s) for s in seconds]


def test_declared_runtimes_give_exact_starts():
    snap = Snapshot(
        NODES, TREE, (running("r1", "a", 0, 600, 1800), running("r2", "b", 1, 60, 7200))
    )
    got = forecast(snap, [job("p1", "a")], NOW, SchedulerConfig(), RuntimeEstimator())
    f = got["p1"]
    assert f.expected == NOW + 1200 and f.latest == NOW + 1200  # r1 ends at its max runtime
    assert "1 workload ahead of it" in f.basis and "declared" in f.basis
    assert f.runtime_basis == "a default of 1 h (no past runs of 1-GPU jobs)"
    assert "expected to start around" in forecast_text(f)


def test_learned_runtimes_give_a_band():
    # r1 has run 10 min; its user's 1-GPU jobs ran 20, 30, 40, 50 and 120 min
    est = RuntimeEstimator(runs("ann", "a", 1200, 1800, 2400, 3000, 7200))
    snap = Snapshot(NODES, TREE, (running("r1", "a", 0, 600), running("r2", "b", 1, 0, 99999)))
    f = forecast(snap, [job("p1", "a")], NOW, SchedulerConfig(), est)["p1"]
    assert f.expected == NOW + 2400 - 600  # the median of the runs longer than 10 min
    assert f.latest == NOW + 7200 - 600  # their p90
    assert "by" in forecast_text(f) and "at the latest" in forecast_text(f)
    assert "learned from the user's past runs" in f.basis
    assert f.runtime_basis == "5 past runs of ann's 1-GPU jobs"


def test_estimates_fall_back_from_user_to_tenant_to_default():
    est = RuntimeEstimator(
        runs("ann", "a", 100, 200) + runs("bob", "a", 1000, 2000, 3000), min_runs=3
    )
    e = est.estimate(job("x", "a", owner="ann"))
    assert (e.source, e.typical_s) == ("tenant", 1000)  # ann has only 2 runs: the tenant's
    assert e.basis == "5 past runs of a's 1-GPU jobs"
    e = est.estimate(job("x", "b", owner="carl"))
    assert (e.source, e.typical_s, e.long_s) == ("default", 3600, 4 * 3600)
    e = est.estimate(job("x", "b", owner="carl", max_runtime_s=900))
    assert (e.source, e.typical_s, e.long_s) == ("declared", 900, 900)
    # work that has outlived every past run: a quarter of its time so far is left
    e = est.estimate(job("x", "a", owner="bob"), elapsed_s=8000)
    assert e.typical_s == 2000 and e.long_s == 8000 and "all shorter" in e.basis
    # the last 50 runs only
    est = RuntimeEstimator(runs("ann", "a", *([10.0] * 60 + [500.0] * 50)), last_n=50)
    assert est.estimate(job("x", "a")).typical_s == 500


def test_tenant_hold_and_retry_delay_the_start():
    snap = Snapshot(NODES, TREE, ())
    pend = [job("p1", "a"), job("p2", "b", retry_at=NOW + 300)]
    got = forecast(
        snap, pend, NOW, SchedulerConfig(), RuntimeEstimator(), tenant_holds={"a": NOW + 900}
    )
    assert got["p1"].expected == NOW + 900
    assert got["p2"].expected == NOW + 300


def test_capacity_hold_takes_the_gpus_first():
    snap = Snapshot(NODES, TREE, (running("r1", "b", 0, 0, 600), running("r2", "b", 1, 0, 600)))
    hold = CapacityHold("a", NOW + 300, NOW + 3900, gpus=2)
    got = forecast(
        snap, [job("p1", "b")], NOW, SchedulerConfig(), RuntimeEstimator(), capacity_holds=[hold]
    )
    assert got["p1"].expected == NOW + 3900  # after the window, not when r1/r2 end


def test_the_horizon_and_cycle_cap_bound_the_work():
    snap = Snapshot(NODES, TREE, (running("r1", "a", 0, 0), running("r2", "b", 1, 0)))
    pend = [job(f"p{i}", "a") for i in range(40)]
    limits = ForecastLimits(horizon_s=6 * 3600, max_cycles=10)
    got = forecast(snap, pend, NOW, SchedulerConfig(), RuntimeEstimator(), limits=limits)
    late = [f for f in got.values() if f.expected is None]
    assert late, "40 one-hour jobs on 2 GPUs cannot all start within 6 h"
    assert all(f.until <= NOW + 6 * 3600 for f in got.values())
    assert "not expected to start before" in forecast_text(late[0])


def test_running_checkpointing_work_under_service_levels_is_seeded_like_admitted_work():
    """With service levels, the replay counts running checkpointing work per tenant (its
    level victims); work seeded from the live state is counted too, so its end is not a
    KeyError that fails every forecast pass."""
    r1 = running("r1", "a", 0, 600, 1800)
    ckpt = dataclasses.replace(r1.workload, checkpointing=True, preemptible=True)
    snap = Snapshot(NODES, TREE, (RunningWorkload(ckpt, r1.allocation), running("r2", "b", 1, 60)))
    config = SchedulerConfig(service_levels_s=(3600.0,))
    got = forecast(snap, [job("p1", "a")], NOW, config, RuntimeEstimator())
    assert got["p1"].expected == NOW + 1200  # r1 ends at its max runtime
