"""The culler and accounting loops over a real store, a ManualClock and the fake executor;
idleness and busyness are injected (the telemetry loop's own figures are tested beside it)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.domain import Quota, Tenant
from gpupool.server.loops.accounting import AccountingLoop, split_by_day
from gpupool.server.loops.culler import CullerLoop
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.store import EventRepo, TenantRepo, UsageRepo


def state(world, wid: str) -> dict:
    return world.get("admin", f"/workloads/{wid}").json()


def start(world, **request) -> str:
    w = world.submit(**request)
    world.scheduler.run_once()
    assert state(world, w["id"])["state"] == "running"
    return w["id"]


def set_idle_timeout(world, seconds: float | None) -> None:
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("lab", Quota.gpus(2, 3), idle_timeout_s=seconds), 0)


def events(world, wid: str) -> list[str]:
    with world.ctx.store.read() as s:
        return [e.kind for _, e in reversed(EventRepo(s).list(workload_id=wid))]


def test_idle_holder_is_warned_then_culled(world):
    set_idle_timeout(world, 3600)
    idle: dict[str, float] = {}
    culler = CullerLoop(world.ctx, lambda a: idle.get(a.workload_id), warn_before_s=600)
    w = start(world, gpus=1)
    idle[w] = 2999
    assert culler.run_once().warned == []
    idle[w] = 3000
    assert culler.run_once().warned == [w]
    assert culler.run_once().warned == []  # warned once
    idle[w] = 3600
    report = culler.run_once()
    assert list(report.culled) == [w] and "idle for 1.0 h" in report.culled[w]
    ReconcilerLoop(world.ctx).run_once()
    got = state(world, w)
    assert got["state"] == "culled" and "tenant lab stops GPU holders idle" in got["reason"]
    kinds = events(world, w)
    assert kinds.index("workload.cull_warning") < kinds.index("workload.stopping")
    assert kinds[-1] == "workload.culled"


def test_busy_holder_cpu_only_and_unknown_are_never_culled(world):
    set_idle_timeout(world, 60)
    busy = start(world, gpus=1)
    cpu = start(world, cpus=1)
    unknown = start(world, gpus=1)
    figures = {busy: 0.0, cpu: 10_000.0, unknown: None}
    culler = CullerLoop(world.ctx, lambda a: figures[a.workload_id], warn_before_s=30)
    world.clock.advance(10_000)
    report = culler.run_once()
    assert report.culled == {} and report.warned == []
    for wid in (busy, cpu, unknown):
        assert state(world, wid)["state"] == "running"


def test_becoming_busy_clears_the_warning(world):
    set_idle_timeout(world, 100)
    idle = {}
    culler = CullerLoop(world.ctx, lambda a: idle.get(a.workload_id), warn_before_s=50)
    w = start(world, gpus=1)
    idle[w] = 60
    assert culler.run_once().warned == [w]
    idle[w] = 0
    culler.run_once()
    idle[w] = 70
    assert culler.run_once().warned == [w]  # a new idle period warns again


def test_tenant_without_idle_policy_keeps_idle_work(world):
    set_idle_timeout(world, None)
    culler = CullerLoop(world.ctx, lambda a: 1e9)
    w = start(world, gpus=1)
    assert culler.run_once().culled == {}
    assert state(world, w)["state"] == "running"


def test_max_runtime_warns_then_culls_even_busy_work(world):
    culler = CullerLoop(world.ctx, lambda a: 0.0, warn_before_s=60)
    w = start(world, gpus=1, max_runtime_s=600)
    world.clock.advance(539)
    assert culler.run_once().warned == []
    world.clock.advance(1)
    assert culler.run_once().warned == [w]
    world.clock.advance(60)
    assert list(culler.run_once().culled) == [w]
    ReconcilerLoop(world.ctx).run_once()
    got = state(world, w)
    assert got["state"] == "culled" and "max runtime of 10 min" in got["reason"]


def test_split_by_day():
    midnight = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
    assert split_by_day(midnight - 100, midnight + 50) == [("2026-03-01", 100), ("2026-03-02", 50)]
    assert split_by_day(midnight, midnight) == []


def usage(world, group_by: str) -> dict[str, tuple[float, float]]:
    with world.ctx.store.read() as s:
        return {
            u.key: (u.gpu_seconds_allocated, u.gpu_seconds_busy)
            for u in UsageRepo(s).rollup(group_by)
        }


def test_accounting_allocated_and_busy_per_workload_user_tenant(world):
    busy = {}
    acc = AccountingLoop(world.ctx, lambda a, since: busy.get(a.workload_id), lambda a: 1000.0)
    a = start(world, gpus=2)
    b = start(world, role="outsider", gpu_fraction=0.5, gpu_memory_mib=10240)
    cpu = start(world, cpus=1)
    busy[a] = 0.5
    acc.run_once()  # opens the books
    world.clock.advance(100)
    acc.run_once()
    by_wl = usage(world, "workload")
    # a started 2 s before the first pass (submit advances the clock), b 1 s
    assert by_wl[a] == (2 * 102, 2 * 102 * 0.5)
    assert by_wl[b] == (0.5 * 101, 0.0)  # busy unknown: 0
    assert cpu not in by_wl
    # a ends; the next pass accounts it up to its release, not up to the pass
    world.clock.advance(10)
    world.executor.finish(a, 0)
    ReconcilerLoop(world.ctx).run_once()
    world.clock.advance(50)
    acc.run_once()
    by_wl = usage(world, "workload")
    assert by_wl[a][0] == 2 * 112
    assert by_wl[b][0] == 0.5 * 161
    by_user = usage(world, "user")
    assert set(by_user) == {"ann", "otto"}
    assert usage(world, "tenant")["lab"][0] == 2 * 112
    day = datetime.fromtimestamp(world.clock.now(), UTC).strftime("%Y-%m-%d")
    assert set(usage(world, "day")) == {day}
    with world.ctx.store.read() as s:
        row = UsageRepo(s).rollup("workload")[0]
    assert row.gpu_memory_mib_max == 1000


def test_accounting_resumes_after_a_restart_without_double_counting(world):
    acc = AccountingLoop(world.ctx)
    a = start(world, gpus=1)
    acc.run_once()
    world.clock.advance(100)
    acc.run_once()
    before = usage(world, "workload")[a][0]
    world.clock.advance(30)  # the server was down for these 30 s
    acc2 = AccountingLoop(world.ctx)  # a new server process
    acc2.run_once()
    assert usage(world, "workload")[a][0] == before + 30
    acc2.run_once()
    assert usage(world, "workload")[a][0] == before + 30


def test_accounting_takes_the_engines_own_start_and_end(world):
    """An engine that knows when it really ran the work (Slurm: the job's start and end)
    is taken at its word: nothing while it queues there, up to its end even when gpupool
    noticed the end later (time accounted past it is taken back)."""
    times: dict[str, tuple[float | None, float | None]] = {}
    world.ctx.executor.run_times = lambda wid: times.get(wid, (None, None))
    acc = AccountingLoop(world.ctx)
    a = start(world, gpus=2)
    t_admit = world.clock.now()
    acc.run_once()
    world.clock.advance(20)
    acc.run_once()
    assert a not in usage(world, "workload")  # queued in the engine: not started yet
    times[a] = (t_admit + 5, None)
    world.clock.advance(100)
    acc.run_once()
    assert usage(world, "workload")[a][0] == 2 * (world.clock.now() - t_admit - 5)
    times[a] = (t_admit + 5, t_admit + 50)  # it had ended at +50; gpupool hears of it now
    acc.run_once()
    assert usage(world, "workload")[a][0] == 2 * 45
    world.clock.advance(10)
    world.executor.finish(a, 0)
    ReconcilerLoop(world.ctx).run_once()
    world.clock.advance(60)
    acc.run_once()
    assert usage(world, "workload")[a][0] == 2 * 45
    assert usage(world, "tenant")["lab"][0] == 2 * 45


def test_work_shorter_than_the_interval_is_accounted_once(world):
    """Work admitted and ended between two passes was never seen running: it is accounted
    from its released allocation, once."""
    acc = AccountingLoop(world.ctx)
    acc.run_once()
    a = start(world, gpus=2)
    world.clock.advance(20)
    world.executor.finish(a, 0)
    ReconcilerLoop(world.ctx).run_once()
    assert state(world, a)["state"] == "succeeded"
    world.clock.advance(40)
    acc.run_once()
    assert usage(world, "workload")[a][0] == 2 * 20
    world.clock.advance(60)
    acc.run_once()
    acc.run_once()
    assert usage(world, "workload")[a][0] == 2 * 20
