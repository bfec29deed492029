"""Attained service across attempts in the server (issue #20), over a real store (SQLite and
PostgreSQL), the fake executor and a ManualClock: checkpointing work preempted and requeued
carries the GPU-time of its earlier attempts into `Snapshot.attained_service` (under its id)
and into `attained_gpu_hours`; work without checkpointing starts again at 0; with
`service_levels_s` a server cycle orders and preempts by it, as the simulator does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain import WorkloadState
from gpupool.engines.common.executor import ExecState, ExecStatus
from gpupool.engines.fake.executor import NeverStarts
from gpupool.server.services import lifecycle
from gpupool.store import UsageRepo

S = WorkloadState
HOUR = 3600.0


def state(world, wid: str) -> str:
    return world.get("admin", f"/workloads/{wid}").json()["state"]


def attained(world, wid: str) -> float:
    return world.get("member", f"/workloads/{wid}").json()["attained_gpu_hours"]


def listed(world, wid: str) -> float:
    """`attained_gpu_hours` as GET /workloads lists it."""
    rows = world.get("member", "/workloads").json()
    return next(r["attained_gpu_hours"] for r in rows if r["id"] == wid)


def preempt(world, wid: str) -> None:
    """Stop `wid` as the scheduler loop does for a Preemption decision."""
    lifecycle.request_stop(world.ctx, wid, S.PREEMPTED, "preempted for the test")


def run_then_preempt(world, wid: str, hours: float) -> None:
    report = world.scheduler.run_once()
    assert wid in report.started
    world.clock.advance(hours * HOUR)
    preempt(world, wid)
    assert state(world, wid) == "pending"


def with_levels(world, *levels_s: float) -> None:
    """Service levels at `levels_s`; any higher level may be preempted (one level apart)."""
    ctx = world.ctx
    sched = replace(ctx.settings.scheduler, service_levels_s=levels_s, preempt_levels_apart=1)
    ctx.settings = replace(ctx.settings, scheduler=sched)


def test_requeued_checkpointing_work_carries_its_attained_service(world):
    c = world.submit(gpus=2, checkpointing=True)["id"]
    run_then_preempt(world, c, 1.0)  # 2 GPUs x 1 h
    with world.ctx.store.write() as s:  # the accounting loop's per-tenant usage
        UsageRepo(s).add(
            workload_id=c, tenant="lab", user="ann", day="2026-05-28", gpu_seconds_allocated=7200
        )
    snap, pending = world.scheduler.snapshot()
    assert [w.id for w in pending] == [c]
    assert snap.attained_service[c] == pytest.approx(7.2e6)
    assert snap.attained_service["lab"] == pytest.approx(7.2e6)  # tenant keys stay
    assert attained(world, c) == listed(world, c) == 2.0
    queued = world.get("member", "/queue").json()
    assert [q["workload"]["attained_gpu_hours"] for q in queued] == [2.0]
    # readmitted: the snapshot still carries the earlier attempts only (the scheduler adds
    # the current one from its allocation); users see both
    world.scheduler.run_once()
    assert state(world, c) == "running"
    world.clock.advance(0.5 * HOUR)
    snap, _ = world.scheduler.snapshot()
    assert snap.attained_service[c] == pytest.approx(7.2e6)
    assert attained(world, c) == listed(world, c) == 3.0
    world.executor.finish(c)
    lifecycle.settle(world.ctx, c)
    assert state(world, c) == "succeeded"
    world.clock.advance(HOUR)  # ended: no longer grows
    assert attained(world, c) == listed(world, c) == 3.0
    snap, _ = world.scheduler.snapshot()
    assert c not in snap.attained_service


def test_requeued_work_without_checkpointing_starts_again_at_zero(world):
    p = world.submit(gpus=2)["id"]
    run_then_preempt(world, p, 1.0)
    snap, _ = world.scheduler.snapshot()
    assert snap.attained_service.get(p, 0.0) == 0.0
    assert attained(world, p) == listed(world, p) == 0.0
    world.scheduler.run_once()  # restarts from scratch
    world.clock.advance(0.5 * HOUR)
    assert attained(world, p) == listed(world, p) == 1.0  # this attempt only
    world.executor.finish(p)
    lifecycle.settle(world.ctx, p)
    assert attained(world, p) == 1.0
    shown = world.get("member", f"/workloads/{p}").json()
    assert shown["preemptions"] == 1 and shown["state"] == "succeeded"


def test_an_attempt_that_did_not_start_is_not_kept(world):
    c = world.submit(gpus=2, checkpointing=True)["id"]
    run_then_preempt(world, c, 1.0)
    world.ctx.executor = NeverStarts(world.clock, world=world.executor.world)
    world.scheduler.run_once()
    assert state(world, c) == "starting"
    world.clock.advance(0.25 * HOUR)  # the engine gives up: its pod never ran
    rejected = ExecStatus(c, ExecState.REJECTED, message="the pod stayed Pending")
    lifecycle.settle(world.ctx, c, rejected)
    assert state(world, c) == "pending"
    snap, _ = world.scheduler.snapshot()
    assert snap.attained_service[c] == pytest.approx(7.2e6)  # not 7.2e6 + 1.8e6
    assert attained(world, c) == 2.0


def test_with_service_levels_fresh_work_goes_before_requeued_work_past_a_threshold(world):
    with_levels(world, HOUR)
    c = world.submit(gpus=2, checkpointing=True)["id"]
    run_then_preempt(world, c, 1.0)  # 2 GPU-hours: past the 1 GPU-hour threshold
    fresh = world.submit(gpus=2)["id"]  # submitted later; lab may hold 3 GPUs: one fits
    report = world.scheduler.run_once()
    assert report.admitted == [fresh]
    assert state(world, c) == "pending"
    waiting = world.get("member", f"/workloads/{c}").json()["pending"]
    assert waiting["tenant_position"] >= 1 and waiting["reason"]


def test_with_service_levels_resumed_work_keeps_its_level_while_it_runs(world):
    # the level of running checkpointing work counts its earlier attempts too (as in the
    # simulator): resumed for 5 minutes it is still past the threshold, so the tenant's fresh
    # work that does not fit preempts it
    with_levels(world, HOUR)
    c = world.submit(gpus=2, checkpointing=True)["id"]
    run_then_preempt(world, c, 1.0)
    resumed = world.clock.now()
    world.scheduler.run_once()  # resumes
    other = world.submit(role="outsider", gpus=2)["id"]  # fills the node
    world.scheduler.run_once()
    assert state(world, c) == state(world, other) == "running"
    world.clock.advance(world.ctx.settings.scheduler.min_runtime_s)
    fresh = world.submit(gpus=1)["id"]
    report = world.scheduler.run_once()
    assert report.preempted == [c]
    assert state(world, c) == "pending"
    second = 2 * (world.clock.now() - resumed) / HOUR  # 2 GPUs since it resumed
    assert attained(world, c) == pytest.approx(2.0 + second, abs=1e-4)
    world.scheduler.run_once()
    assert state(world, fresh) == "running"


def test_lists_and_the_single_view_agree_and_the_field_is_read_only(world):
    c = world.submit(gpus=2, checkpointing=True)["id"]
    run_then_preempt(world, c, 1.0)  # pending, 2 GPU-hours kept
    world.scheduler.run_once()  # c resumes
    done = world.submit(gpu_fraction=0.5, gpu_memory_mib=1024)["id"]
    world.scheduler.run_once()
    world.clock.advance(HOUR)
    world.executor.finish(done)
    lifecycle.settle(world.ctx, done)
    waiting = world.submit(gpus=1, checkpointing=True)["id"]  # never ran
    world.clock.advance(60)
    views = {r["id"]: r["attained_gpu_hours"] for r in world.get("member", "/workloads").json()}
    single = {wid: attained(world, wid) for wid in (c, done, waiting)}
    assert views == single
    assert single[done] == 0.5 and single[waiting] == 0.0 and single[c] > 4.0
    r = world.post(
        "member", "/workloads", json={"command": ["x"], "gpus": 1, "attained_gpu_hours": 9}
    )
    assert r.status_code == 422 and "attained_gpu_hours" in r.text
