"""The telemetry loop on simulated GPUs with a ManualClock: events for policing detections
(once per condition), warn-then-kill for policed shares and foreign GPUs, never a kill for
MPS-enforced memory, heartbeat, and the idle/busy figures the culler and accounting use."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import Enforcement, Node, Quota, SharingMode, Tenant
from gpupool.scheduler.types import SchedulerConfig
from gpupool.server.loops.telemetry import TelemetryLoop
from gpupool.store import AllocationRepo, EventRepo, NodeRepo, TenantRepo
from gpupool.telemetry import Attribution, SimulatedSource, Via


class StubAttributor:
    """pid -> workload id, as the real Attributor finds it from GPUPOOL_WORKLOAD_ID."""

    def __init__(self) -> None:
        self.owners: dict[int, str] = {}

    def attribute_all(self, pids):
        return {
            p: Attribution(p, Via.ENV if p in self.owners else Via.NONE, self.owners.get(p))
            for p in pids
        }


@pytest.fixture
def sim(world):
    """Replace n1 by a node 'sim' with 2 simulated H100s (GPU 1 shared)."""
    src = SimulatedSource("2xH100-80GB", clock=world.clock, hostname="sim")
    snap = src.snapshot()
    with world.ctx.store.write() as s:
        repo = NodeRepo(s)
        repo.delete("n1")
        repo.upsert(
            Node("sim", tuple(g.to_domain() for g in snap.gpus), cpu_milli=8000, memory_mib=64000)
        )
        repo.set_sharing(src.uuid(1), SharingMode.SHARED)
    killed: list[int] = []
    attr = StubAttributor()
    loop = TelemetryLoop(
        world.ctx, src, node="sim", kill=killed.append, kill_after_s=30, attributor=attr
    )
    return src, loop, attr, killed


def start(world, **request) -> str:
    w = world.submit(**request)
    world.scheduler.run_once()
    assert world.get("admin", f"/workloads/{w['id']}").json()["state"] == "running"
    return w["id"]


def kinds(world) -> list[str]:
    with world.ctx.store.read() as s:
        return [e.kind for _, e in reversed(EventRepo(s).list(kind="", limit=1000))]


def telemetry_events(world) -> list[str]:
    return [k for k in kinds(world) if k.startswith(("telemetry.", "gpu."))]


def alloc(world, wid):
    with world.ctx.store.read() as s:
        return AllocationRepo(s).active_for(wid)


def test_policed_share_over_memory_is_warned_then_killed(world, sim):
    src, loop, attr, killed = sim
    w = start(world, gpu_fraction=0.5, gpu_memory_mib=10240)
    assert alloc(world, w).shares[0].enforcement is Enforcement.POLICED
    src.add_process(1, 4242, memory_mib=20000, sm_util=50)
    attr.owners[4242] = w
    loop.run_once()
    assert telemetry_events(world) == ["telemetry.over_memory"] and killed == []
    world.clock.advance(29)
    loop.run_once()
    assert killed == [] and telemetry_events(world) == ["telemetry.over_memory"]
    world.clock.advance(1)
    loop.run_once()
    assert killed == [4242]
    assert telemetry_events(world) == ["telemetry.over_memory", "gpu.policed"]
    with world.ctx.store.read() as s:
        ev = EventRepo(s).list(kind="gpu.policed")[0][1]
    assert ev.workload_id == w and "over its share of 10240 MiB" in ev.message
    assert ev.data["enforcement"] == "policed"
    loop.run_once()
    assert killed == [4242]  # acted once


def test_mps_share_over_memory_is_recorded_not_killed(world, sim):
    src, loop, attr, killed = sim
    world.ctx.settings = dataclasses.replace(
        world.ctx.settings, scheduler=SchedulerConfig(shared_enforcement=Enforcement.MPS)
    )
    w = start(world, gpu_fraction=0.5, gpu_memory_mib=10240)
    assert alloc(world, w).shares[0].enforcement is Enforcement.MPS
    src.add_process(1, 77, memory_mib=20000, mps=True)
    attr.owners[77] = w
    loop.run_once()
    world.clock.advance(100)
    loop.run_once()
    assert killed == [] and telemetry_events(world) == ["telemetry.over_memory"]


def test_foreign_gpu_use_is_killed_and_unowned_only_reported(world, sim):
    src, loop, attr, killed = sim
    w = start(world, gpus=1)
    gpu = alloc(world, w).shares[0].gpu_index
    other = 1 - gpu
    src.add_process(other, 501, memory_mib=100)  # w's process on a GPU it does not hold
    attr.owners[501] = w
    src.add_process(gpu, 502, memory_mib=100)  # nobody's process on w's GPU
    loop.run_once()
    world.clock.advance(30)
    loop.run_once()
    assert killed == [501]
    ev = telemetry_events(world)
    assert "telemetry.foreign_gpu" in ev and "telemetry.unowned_on_allocated" in ev
    assert ev.count("gpu.policed") == 1


def test_heartbeat_and_idle_and_busy_figures(world, sim):
    src, loop, attr, killed = sim
    w = start(world, gpus=1)
    a = alloc(world, w)
    assert loop.idle_seconds(a) is None  # no sample yet: no evidence
    src.set_utilization(a.shares[0].gpu_index, 0)
    loop.run_once()
    world.clock.advance(120)
    loop.run_once()
    assert loop.idle_seconds(a) == 120
    assert loop.busy_fraction(a) == 0
    src.set_utilization(a.shares[0].gpu_index, 40)
    loop.run_once()
    assert loop.idle_seconds(a) == 0
    assert loop.busy_fraction(a) == pytest.approx(0.4)
    for util in (80, 20):
        world.clock.advance(10)
        src.set_utilization(a.shares[0].gpu_index, util)
        loop.run_once()
    assert loop.busy_fraction(a) == pytest.approx(0.2)  # the latest sample
    # over a window: the mean of the samples in it, (80 + 20) / 2
    assert loop.busy_fraction(a, since=world.clock.now() - 15) == pytest.approx(0.5)
    with world.ctx.store.read() as s:
        assert NodeRepo(s).get("sim").last_heartbeat == world.clock.now()
    assert loop.sampler.latest is not None


def test_per_user_mode_warns_then_kills_a_persons_process_on_a_gpu_others_hold(world, sim):
    src, _, _, _ = sim
    killed: list[int] = []
    people = {601: 1234, 602: 0}  # 601: a person's process; 602: root's (a system service)

    class ByUid:
        def attribute_all(self, pids):
            return {p: Attribution(p, Via.UNIX_USER, uid=people.get(p)) for p in pids}

    loop = TelemetryLoop(
        world.ctx,
        src,
        node="sim",
        kill=killed.append,
        kill_after_s=30,
        attributor=ByUid(),
        police_unowned=True,
    )
    w = start(world, gpus=1)
    gpu = alloc(world, w).shares[0].gpu_index
    src.add_process(gpu, 601, memory_mib=100)
    src.add_process(gpu, 602, memory_mib=100)
    loop.run_once()
    assert killed == [] and "telemetry.unowned_on_allocated" in telemetry_events(world)
    world.clock.advance(30)
    loop.run_once()
    assert killed == [601]  # warned first, then stopped; root's process is never killed
    assert telemetry_events(world).count("gpu.policed") == 1


def test_a_multi_node_jobs_process_on_a_node_other_than_rank_0_is_its_own(world, sim):
    """A gang holds GPUs on `sim` although its allocation's first node (rank 0) is another:
    its process there is on GPUs it holds, not foreign. Before, the loop read only the
    allocations whose first node was its own and killed that process."""
    src, loop, attr, killed = sim
    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node(
                "a-node",
                tuple(
                    dataclasses.replace(g, uuid=f"GPU-a-{g.index}", index=g.index)
                    for g in NodeRepo(s).get("sim").gpus
                ),
                cpu_milli=8000,
                memory_mib=64000,
            )
        )
        TenantRepo(s).save(Tenant("lab", Quota.gpus(4, 4)), world.clock.now())
    w = start(world, nodes=2, gpus_per_node=2)
    a = alloc(world, w)
    assert a.nodes == ("a-node", "sim")
    src.add_process(0, 601, memory_mib=100)
    attr.owners[601] = w
    loop.run_once()
    world.clock.advance(30)
    loop.run_once()
    assert killed == []
    assert "telemetry.foreign_gpu" not in telemetry_events(world)
