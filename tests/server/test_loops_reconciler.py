"""The reconciler loop over a real store with the fake executors and a ManualClock: exit
states, lost work, adoption after a restart without relaunching, requeue of never-launched
admissions, re-sent stops, orphaned work, and MPS daemons for shared GPUs."""

from __future__ import annotations

from gpupool.domain import Allocation, Share, WorkloadState
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.engines.local.mps import MPSManager
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.store import AllocationRepo, EventRepo, WorkloadRepo
from gpupool.system import SystemSettings, build_system
from tests.engines.conftest import make_fake_mps_binary
from tests.support import open_to_others

S = WorkloadState


def state(world, wid: str) -> dict:
    return world.get("admin", f"/workloads/{wid}").json()


def running(world, **request) -> str:
    w = world.submit(**(request or {"gpus": 1}))
    world.scheduler.run_once()
    assert state(world, w["id"])["state"] == "running"
    return w["id"]


def test_exit_codes_become_states(world):
    rec = ReconcilerLoop(world.ctx)
    ok, bad = running(world), running(world)
    world.executor.finish(ok, 0)
    world.executor.finish(bad, 3)
    report = rec.run_once()
    assert report.changed == {ok: "succeeded", bad: "failed"}
    got = state(world, bad)
    assert got["exit_code"] == 3 and "exited with code 3" in got["reason"]
    assert state(world, ok)["exit_code"] == 0
    with world.ctx.store.read() as s:
        assert AllocationRepo(s).active() == []
    assert rec.run_once().changed == {}  # nothing more to do


def test_vanished_and_forgotten_work_is_lost(world):
    rec = ReconcilerLoop(world.ctx)
    a, b = running(world), running(world)
    world.executor.lose(a)
    world.executor.forget(b)
    assert rec.run_once().changed == {a: "lost", b: "lost"}


def test_slow_start_becomes_running_when_the_executor_says_so(world):
    from gpupool.engines.fake.executor import SlowExecutor

    ex = SlowExecutor(world.clock)
    world.ctx.executor = ex
    w = world.submit(gpus=1)
    world.scheduler.run_once()
    rec = ReconcilerLoop(world.ctx)
    rec.run_once()
    assert state(world, w["id"])["state"] == "starting"
    ex.release(w["id"])
    assert rec.run_once().changed == {w["id"]: "running"}


def test_restart_adopts_running_work_and_settles_what_ended(world):
    alive, ended = running(world, gpus=2), running(world, gpus=1)
    # the server dies; meanwhile one job ends with code 4
    world.executor.finish(ended, 4)
    new_executor = world.executor.reborn()
    app2 = build_system(
        SystemSettings(server=world.ctx.settings),
        FakeEngine(new_executor),
        clock=world.clock,
        store=world.ctx.store,
    ).app
    ctx2 = app2.state.ctx
    rec = ReconcilerLoop(ctx2)
    report = rec.run_once()
    assert report.adopted == [alive]
    assert report.changed == {ended: "failed"}
    with ctx2.store.read() as s:
        assert WorkloadRepo(s).get(alive).state is S.RUNNING
        assert WorkloadRepo(s).get(ended).exit_code == 4
    SchedulerLoop(ctx2).run_once()
    assert new_executor.launches_of(alive) == 1  # not restarted
    assert new_executor.launches_of(ended) == 1
    # the freed GPU can be given again, the held ones cannot (lab's limit is 3 GPUs)
    w = world.submit(gpus=1)
    SchedulerLoop(ctx2).run_once()
    assert state(world, w["id"])["state"] == "running"
    w3 = world.submit(gpus=1)
    SchedulerLoop(ctx2).run_once()
    assert state(world, w3["id"])["state"] == "pending"


def test_admission_never_launched_is_requeued_after_the_grace(world):
    w = world.submit(gpus=1)
    now = world.clock.now()
    alloc = Allocation(w["id"], "n1", (Share("n1", 0, "GPU-n1-0", 1000, 81920),), since=now)
    with world.ctx.store.write() as s:  # the server died right after committing the admission
        AllocationRepo(s).allocate(alloc)
        WorkloadRepo(s).change_state(w["id"], S.ADMITTED, now, "admitted on n1")
    rec = ReconcilerLoop(world.ctx, launch_grace_s=60)
    rec.run_once()
    assert state(world, w["id"])["state"] == "admitted"
    world.clock.advance(60)
    assert rec.run_once().requeued == [w["id"]]
    got = state(world, w["id"])
    assert got["state"] == "pending" and "never launched" in got["reason"]
    world.scheduler.run_once()
    assert state(world, w["id"])["state"] == "running"
    assert world.executor.launches_of(w["id"]) == 1


def test_stop_the_executor_never_got_is_resent(world):
    w = running(world)
    with world.ctx.store.write() as s:  # stored, then the server died before executor.stop
        WorkloadRepo(s).request_stop(w, S.CANCELLED, "cancelled by ann", world.clock.now())
    rec = ReconcilerLoop(world.ctx)
    report = rec.run_once()
    assert report.stops_resent == [w]
    assert world.executor.stop_calls[-1][:2] == (w, "cancelled by ann")
    rec.run_once()
    assert state(world, w)["state"] == "cancelled"


def test_orphaned_work_is_stopped_with_an_event(world):
    from gpupool.domain import Workload

    ghost = Workload(id="w-ghost", tenant="lab", owner="ann", command=("x",))
    world.executor.start(ghost, None)
    done = running(world)
    world.executor.finish(done, 0)
    rec = ReconcilerLoop(world.ctx)
    first = rec.run_once()
    assert first.orphans_stopped == ["w-ghost"]
    # a workload that is terminal in the store but whose process still runs
    world.executor.world.processes.pop(done)
    from gpupool.domain import Workload as W

    world.executor.start(W(id=done, tenant="lab", owner="ann", command=("x",)), None)
    report = rec.run_once()
    assert report.orphans_stopped == [done]
    assert world.executor.list_running() == []
    with world.ctx.store.read() as s:
        kinds = [e.kind for _, e in EventRepo(s).list(kind="executor.")]
    assert kinds == ["executor.orphan_stopped"] * 2


def test_mps_daemons_follow_the_shared_gpus(world, tmp_path):
    open_to_others(tmp_path)
    events = []
    mgr = MPSManager(
        tmp_path / "mps",
        binary=make_fake_mps_binary(tmp_path / "bin"),
        on_event=lambda k, m, d: events.append(k),
    )
    try:
        rec = ReconcilerLoop(world.ctx, mps=mgr, node="n1")
        assert rec.run_once().mps == {"GPU-n1-3": True}  # the seed makes GPU 3 shared
        r = world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "shared"})
        assert r.status_code == 200
        assert rec.run_once().mps == {"GPU-n1-2": True, "GPU-n1-3": True}
        world.patch("admin", "/gpus/GPU-n1-3", json={"sharing": "exclusive"})
        assert rec.run_once().mps == {"GPU-n1-2": True}
        assert not mgr.healthy("GPU-n1-3")
        assert events.count("mps.started") == 2 and events.count("mps.stopped") == 1
    finally:
        mgr.stop_all()


def test_fake_executor_untouched_by_unknown_admitted_within_grace(world):
    # executor reports unknown for admitted work that is being launched right now: wait
    ex = FakeExecutor(world.clock)
    world.ctx.executor = ex
    rec = ReconcilerLoop(world.ctx)
    assert rec.run_once().changed == {}


def test_enforcement_the_executor_really_applied_is_recorded(world):
    import dataclasses

    from gpupool.domain import Enforcement
    from gpupool.scheduler.types import SchedulerConfig

    world.ctx.settings = dataclasses.replace(
        world.ctx.settings, scheduler=SchedulerConfig(shared_enforcement=Enforcement.MPS)
    )
    world.executor.downgrade = {"GPU-n1-3": Enforcement.POLICED}  # e.g. no healthy daemon
    w = world.submit(gpu_fraction=0.5, gpu_memory_mib=10240)
    world.scheduler.run_once()
    before = state(world, w["id"])["allocation"]["shares"][0]["enforcement"]
    assert before == "mps"
    rec = ReconcilerLoop(world.ctx)
    report = rec.run_once()
    assert report.enforcement_corrected == {w["id"]: {"GPU-n1-3": "policed"}}
    got = state(world, w["id"])
    assert got["allocation"]["shares"][0]["enforcement"] == "policed"
    assert "workload.enforcement" in [e["kind"] for e in got["events"]]
    assert rec.run_once().enforcement_corrected == {}  # once


def test_would_change_mirrors_apply_status(monkeypatch):
    """The reconciler skips the write when `would_change` says no: for every workload state x
    executor state x stop request, apply_status changes something iff would_change."""
    from dataclasses import replace

    from gpupool.domain import Request, Workload, WorkloadState
    from gpupool.engines.common.executor import ExecState, ExecStatus
    from gpupool.server.services import lifecycle
    from gpupool.store import WorkloadRecord

    calls: list[str] = []

    class RecordingRepo:
        def __init__(self, _s):
            pass

        def change_state(self, wid, to, now, reason, **kw):
            calls.append(str(to))
            return replace(base, state=to)

    monkeypatch.setattr(lifecycle, "WorkloadRepo", RecordingRepo)
    base = Workload(id="w-1", tenant="lab", owner="ann", request=Request(gpus=1), submitted_at=0)
    seen = set()
    for state in WorkloadState:
        for st in ExecState:
            for stopping in (None, (WorkloadState.CANCELLED, "cancelled by ann")):
                rec = WorkloadRecord(replace(base, state=state), None, None, None, stopping)
                calls.clear()
                lifecycle.apply_status(None, rec, ExecStatus("w-1", st), 0.0)
                expect = lifecycle.would_change(rec, ExecStatus("w-1", st))
                assert bool(calls) == expect, (state, st, stopping, calls)
                seen.add(expect)
    assert seen == {True, False}


def test_a_starting_notebook_server_is_looked_at_often_until_it_reports_its_endpoint(world):
    """The hub's spawner waits for a notebook's endpoint: while its server runs without one,
    passes come every `endpoint_interval_s`, for at most `endpoint_watch_s`; then (and for
    other work) at the usual pace."""
    rec = ReconcilerLoop(world.ctx, interval_s=2.0)
    running(world)
    rec.run_once()
    assert rec.interval_s == 2.0  # plain work: the usual pace
    nb = running(world, kind="notebook", gpus=1, command=["jupyterhub-singleuser"])
    assert rec.run_once().awaiting_endpoint == [nb] and rec.interval_s == 0.25
    world.executor.process(nb).endpoint = "http://127.0.0.1:41234"
    assert rec.run_once().awaiting_endpoint == [] and rec.interval_s == 2.0
    assert state(world, nb)["endpoint"] == "http://127.0.0.1:41234"
    # a notebook that never listens is watched closely for a while only
    quiet = running(world, kind="notebook", gpus=1, command=["sleep", "1000"])
    assert rec.run_once().awaiting_endpoint == [quiet]
    world.clock.advance(rec.endpoint_watch_s + 1)
    assert rec.run_once().awaiting_endpoint == [] and rec.interval_s == 2.0
