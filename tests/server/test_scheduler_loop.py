"""The scheduler loop over a real store with the fake executors and a ManualClock: admission,
start failure and requeue, preemption, unschedulable work, cancel while stopping, and no
double allocation when two schedulers race. Also the loop base class."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gpupool.domain import Quota, Tenant, WorkloadState
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FailingExecutor, FakeExecutor
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop, LoopGroup
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.services import lifecycle
from gpupool.server.settings import Settings
from gpupool.store import AllocationRepo, TenantRepo, WorkloadRepo, open_store
from gpupool.system import SystemSettings, build_system

S = WorkloadState


def state(world, wid: str) -> str:
    return world.get("admin", f"/workloads/{wid}").json()["state"]


def test_admitted_work_is_started_with_its_gpus(world):
    a = world.submit(gpus=2)
    report = world.scheduler.run_once()
    assert report.admitted == report.started == [a["id"]]
    assert state(world, a["id"]) == "running"
    proc = world.executor.process(a["id"])
    assert len(proc.env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert world.executor.launches_of(a["id"]) == 1
    world.scheduler.run_once()  # nothing new: no second launch
    assert world.executor.launches_of(a["id"]) == 1


def test_start_failure_rolls_back_and_requeues_with_the_reason(world):
    world.ctx.executor = FailingExecutor(world.clock, failures=1, message="engine said no")
    a = world.submit(gpus=1)
    report = world.scheduler.run_once()
    assert a["id"] in report.start_failed
    got = world.get("admin", f"/workloads/{a['id']}").json()
    assert got["state"] == "pending" and "engine said no" in got["reason"]
    assert got["allocation"]["released_at"] is not None
    with world.ctx.store.read() as s:
        assert AllocationRepo(s).active() == []
    world.scheduler.run_once()  # backing off: not tried again yet
    assert state(world, a["id"]) == "pending"
    world.clock.advance(world.ctx.settings.start_retry.backoff_s)
    world.scheduler.run_once()  # the second try works
    assert state(world, a["id"]) == "running"


def test_unschedulable_work_fails_with_the_reason(world):
    # the request fit when submitted, then the admin made every GPU exclusive
    a = world.submit(gpu_fraction=0.5)
    assert world.patch("admin", "/gpus/GPU-n1-3", json={"sharing": "exclusive"}).status_code == 200
    report = world.scheduler.run_once()
    assert report.failed == [a["id"]]
    got = world.get("admin", f"/workloads/{a['id']}").json()
    assert got["state"] == "failed" and got["reason"]


def test_preemption_stops_borrowed_work_and_requeues_it(world):
    # "other" borrows all 4 GPUs beyond its guarantee of 1; then lab (guaranteed 2) asks
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, 4)), 0, create=False)
    big = world.submit(role="outsider", gpus=4)
    world.scheduler.run_once()
    assert state(world, big["id"]) == "running"
    world.clock.advance(3600)  # past the minimum runtime
    small = world.submit(gpus=2)
    report = world.scheduler.run_once()
    assert report.preempted == []  # a lasting shortfall only: not before reclaim_after_s
    world.clock.advance(world.ctx.settings.scheduler.reclaim_after_s)
    report = world.scheduler.run_once()
    assert report.preempted == [big["id"]]
    # the node freed for it is nominated to it until it starts
    assert set(world.scheduler.nominated) == {small["id"]}
    victim = world.get("admin", f"/workloads/{big['id']}").json()
    assert victim["state"] == "pending" and victim["preemptions"] == 1
    kinds = [e["kind"] for e in victim["events"]]
    assert "workload.stopping" in kinds and "workload.preempted" in kinds
    world.scheduler.run_once()
    assert state(world, small["id"]) == "running"
    assert world.scheduler.nominated == {}  # dropped once it no longer waits


def test_a_move_stops_smaller_checkpointing_work_and_starts_it_where_it_was_promised(world):
    # two 4-GPU nodes, "other" runs 6 one-GPU checkpointing jobs within its guarantee of 6
    # (3 a node), so 1 GPU is free on each node and nothing is borrowed: lab is owed 2 GPUs
    # on one node and gets them by a move, not a reclaim
    from gpupool.domain import GPU, Node, SharingMode
    from gpupool.store import NodeRepo

    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node("n2", tuple(GPU(i, f"GPU-n2-{i}", "H100", 81920) for i in range(4)), 64000, 512000)
        )
        NodeRepo(s).set_sharing("GPU-n1-3", SharingMode.EXCLUSIVE)
        TenantRepo(s).save(Tenant("lab", Quota.gpus(2, 8)), 0, create=False)
        TenantRepo(s).save(Tenant("other", Quota.gpus(6, 8)), 0, create=False)
    ex = world.ctx.executor = FakeExecutor(world.clock, ignores_term=True)  # slow to stop
    jobs = [world.submit(role="outsider", gpus=1, checkpointing=True) for _ in range(8)]
    world.scheduler.run_once()
    with world.ctx.store.read() as s:
        on = {a.workload_id: a.node for a in AllocationRepo(s).active()}

    def stop_now(wid: str) -> None:
        world.clock.advance(world.ctx.settings.stop_grace_s)
        ex.tick()  # forced kill
        lifecycle.settle(world.ctx, wid)

    for n in ("n1", "n2"):  # one job ends on each node: 1 GPU free on each
        done = next(w for w, node in on.items() if node == n)
        assert world.delete("outsider", f"/workloads/{done}").status_code == 200
        stop_now(done)
        del on[done]
        jobs = [j for j in jobs if j["id"] != done]
    assert sorted(on.values()) == ["n1", "n1", "n1", "n2", "n2", "n2"]
    world.clock.advance(3600)  # past the minimum runtime
    owed = world.submit(gpus=2)
    world.clock.advance(world.ctx.settings.scheduler.reclaim_after_s)
    report = world.scheduler.run_once()
    assert len(report.preempted) == 1
    (moved,) = report.preempted
    assert moved in {j["id"] for j in jobs}
    to = world.scheduler.nominated[moved]
    assert to == (("n2",) if on[moved] == "n1" else ("n1",))
    assert world.scheduler.nominated[owed["id"]] == (on[moved],)
    got = world.get("admin", f"/workloads/{moved}").json()
    assert any("moved to" in str(e) for e in got["events"]), got["events"]
    reason = world.get("member", f"/workloads/{owed['id']}").json()["pending"]["reason"]
    assert "spread over nodes" in reason
    world.scheduler.run_once()  # the moved job is still stopping: both keep their nominations
    assert state(world, moved) == "running"  # stopping
    assert world.scheduler.nominated[moved] == to
    assert state(world, owed["id"]) == "pending"
    stop_now(moved)
    world.scheduler.run_once()  # both start where they were promised
    with world.ctx.store.read() as s:
        now_on = {a.workload_id: a.node for a in AllocationRepo(s).active()}
    assert now_on[moved] == to[0]
    assert now_on[owed["id"]] == on[moved]
    assert world.scheduler.nominated == {}


def test_cancel_of_work_that_ignores_the_stop_holds_the_gpu_until_it_ends(world):
    ex = FakeExecutor(world.clock, ignores_term=True)
    world.ctx.executor = ex
    a = world.submit(gpus=3)
    world.scheduler.run_once()
    r = world.delete("member", f"/workloads/{a['id']}")
    assert r.status_code == 200 and r.json()["state"] == "running"  # stopping
    b = world.submit(gpus=3)
    world.scheduler.run_once()
    assert state(world, b["id"]) == "pending"  # a's GPUs are still in use
    world.clock.advance(world.ctx.settings.stop_grace_s)
    ex.tick()  # forced kill
    lifecycle.settle(world.ctx, a["id"])
    assert state(world, a["id"]) == "cancelled"
    world.scheduler.run_once()
    assert state(world, b["id"]) == "running"


def test_pending_reasons_are_stored_each_cycle(world):
    world.submit(gpus=3)
    world.clock.advance(1)
    b = world.submit(gpus=2)
    world.scheduler.run_once()
    got = world.get("member", f"/workloads/{b['id']}").json()
    assert got["pending"]["position"] == 1 and got["pending"]["reason"]


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_two_schedulers_racing_never_double_allocate(db, tmp_path):
    from tests.store.databases import POSTGRES_URL, store_url

    if db == "postgres" and not POSTGRES_URL:
        pytest.skip("GPUPOOL_TEST_POSTGRES_URL is not set")
    url = store_url(db, tmp_path)
    from tests.server.conftest import seed

    contexts: list[AppContext] = []
    from gpupool.clock import ManualClock
    from gpupool.engines.fake.executor import FakeWorld

    clock = ManualClock(1_780_000_000.0)
    fake_world = FakeWorld()
    for i in range(2):
        store = open_store(url)
        app = build_system(
            SystemSettings(server=Settings(database_url=url, start_loops=False)),
            FakeEngine(FakeExecutor(clock, world=fake_world)),
            clock=clock,
            store=store,
        ).app
        contexts.append(app.state.ctx)
        if i == 0:
            seed(app.state.ctx)
            with store.write() as s:
                TenantRepo(s).save(Tenant("lab", Quota.gpus(0, 10)), 0, create=False)
    from gpupool.domain import Request, Workload
    from gpupool.store import new_workload_id

    with contexts[0].store.write() as s:
        for i in range(20):
            WorkloadRepo(s).add(
                Workload(
                    new_workload_id(), "lab", "ann", Request(gpus=1), submitted_at=i, command=("x",)
                )
            )
    loops = [SchedulerLoop(c) for c in contexts]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(loop: SchedulerLoop) -> None:
        try:
            for _ in range(3):
                barrier.wait()
                loop.run_once()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            barrier.abort()  # the other loop stops waiting for this one (and fails the test)

    threads = [threading.Thread(target=run, args=(lp,)) for lp in loops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not [e for e in errors if not isinstance(e, threading.BrokenBarrierError)], errors
    with contexts[0].store.read() as s:
        usage = AllocationRepo(s).gpu_usage()
        running = AllocationRepo(s).running()
        states = [r.workload.state for r in WorkloadRepo(s).list()]
    assert all(milli <= 1000 for milli, _ in usage.values())
    assert len(running) == 4 and states.count(S.PENDING) == 16
    launched = fake_world.launches
    assert len(launched) == len(set(launched)) == 4  # nothing launched twice
    for c in contexts:
        c.store.close()


class CountingLoop(Loop):
    name = "counting"

    def __init__(self, fail_first: bool = False):
        super().__init__(interval_s=3600)
        self.fail_first = fail_first
        self.done = 0
        self.ran: asyncio.Event | None = None

    def run_once(self) -> None:
        self.done += 1
        if self.fail_first and self.done == 1:
            raise RuntimeError("boom")


def test_loop_survives_errors_and_is_woken_and_restartable():
    async def scenario() -> None:
        loop = CountingLoop(fail_first=True)
        group = LoopGroup()
        group.add(loop)
        group.start_all()
        # the first pass fails; the loop carries on and runs again when woken
        while loop.passes < 1:
            await asyncio.sleep(0)
        assert loop.errors == 1 and loop.running
        group.wake("counting")
        while loop.passes < 2:
            await asyncio.sleep(0)
        assert loop.done == 2
        await group.stop_all()
        assert not loop.running
        loop.start()  # safe to restart
        while loop.passes < 3:
            await asyncio.sleep(0)
        await loop.stop()
        with pytest.raises(ValueError):
            group.add(CountingLoop())

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
