"""The forecast loop (issue 35 part 1) over a real store, a ManualClock and the fake executor:
every pending workload gets a start-time forecast in the API (workload and queue), learned
from past runs, stored (a restart loses nothing), and dropped once the work starts."""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.server.loops.forecast import ForecastLoop
from gpupool.server.loops.reconciler import ReconcilerLoop


def iso(t: float) -> str:
    return datetime.fromtimestamp(round(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_pending_work_gets_a_forecast_in_the_api_and_keeps_it_over_a_restart(world):
    # n1 has 4 GPUs (one shared): three whole GPUs held for 2 h, 1 h and 30 min
    held = [world.submit(gpus=1, max_runtime_s=s)["id"] for s in (7200, 3600, 1800)]
    world.scheduler.run_once()
    t0 = world.clock.now()
    waiting = world.submit(gpus=3)["id"]
    world.scheduler.run_once()
    loop = ForecastLoop(world.ctx)
    report = loop.run_once()
    assert report.pending == 1 and report.written == 1
    got = world.get("member", f"/workloads/{waiting}").json()
    f = got["pending"]["forecast"]
    started = t0  # the three were started at the first scheduler pass
    assert f["expected"] == iso(started + 7200)  # all three GPUs: after the longest ends
    assert f["latest"] == f["expected"]
    assert "3 workloads ahead of it" in f["basis"] and "declared" in f["basis"]
    assert f["text"].startswith("expected to start around")
    assert f["runtime_basis"] == "a default of 1 h (no past runs of 3-GPU jobs)"
    queue = world.get("member", "/queue").json()
    (entry,) = [e for e in queue if e["workload"]["id"] == waiting]
    assert entry["forecast"] == f
    metrics = world.scrape()
    assert f'gpupool_tenant_expected_wait_seconds{{tenant="lab"}} {7200.0 - 1:.1f}' in metrics
    # a restart: a new loop (nothing in memory) — the stored forecast is still served
    assert world.get("member", f"/workloads/{waiting}").json()["pending"]["forecast"] == f
    assert ForecastLoop(world.ctx).run_once().written == 0  # unchanged: nothing rewritten
    # once it runs, it has no forecast
    world.clock.advance(7200)
    for _ in range(2):
        world.ctx.loops.get("culler").run_once()
        ReconcilerLoop(world.ctx).run_once()
        world.scheduler.run_once()
    got = world.get("member", f"/workloads/{waiting}").json()
    assert got["state"] in ("starting", "running") and got["pending"] is None
    assert held


def test_forecasts_learn_from_finished_runs(world):
    for _ in range(3):  # ann's 1-GPU jobs run 20 min
        wid = world.submit(gpus=1)["id"]
        world.scheduler.run_once()
        world.clock.advance(1200)
        world.executor.finish(wid, 0)
        ReconcilerLoop(world.ctx).run_once()
    blockers = [world.submit(gpus=1)["id"] for _ in range(3)]
    world.scheduler.run_once()
    waiting = world.submit(gpus=1)["id"]
    world.scheduler.run_once()
    ForecastLoop(world.ctx).run_once()
    f = world.get("member", f"/workloads/{waiting}").json()["pending"]["forecast"]
    assert f["runtime_basis"] == "3 past runs of ann's 1-GPU jobs" and f["runtime_s"] == 1200
    assert "learned from the user's past runs" in f["basis"]
    assert len(blockers) == 3


def test_a_costly_pass_runs_less_often(world):
    loop = ForecastLoop(world.ctx, interval_s=30, of_scheduler=0.1, min_share=0.0025)
    sched = world.scheduler
    sched.run_once()
    sched.last.seconds = 0.2  # the scheduler takes 10% of a core (every 2 s)
    assert abs(loop.share() - 0.01) < 1e-12
    world.submit(gpus=3)
    world.submit(gpus=3)
    world.scheduler.run_once()
    world.scheduler.last.seconds = 0.2
    report = loop.run_once()
    assert abs(report.next_in_s - max(30.0, report.seconds / loop.share())) < 1e-9
    world.scheduler.last.seconds = 0.0  # an idle scheduler: the floor
    assert loop.share() == 0.0025
