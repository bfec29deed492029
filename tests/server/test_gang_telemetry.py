"""Culling and accounting of a multi-node job (a gang) through the real assembly: the fake
engine samples two simulated nodes, each with its own telemetry loop, and the system's
culler and accounting loops read the gang's figures from both nodes, not rank 0's alone.
A ManualClock drives every pass; the simulated GPUs stand in for real ones."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Node, Quota, Tenant
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.loops.accounting import AccountingLoop
from gpupool.server.loops.culler import CullerLoop
from gpupool.server.loops.telemetry import TelemetryLoop
from gpupool.server.settings import Settings
from gpupool.store import AllocationRepo, NodeRepo, TenantRepo, UsageRepo
from gpupool.system import SystemSettings, build_system
from gpupool.telemetry import Attribution, SimulatedSource, Via
from tests.server.conftest import World, seed, serving
from tests.store.databases import DB_PARAMS, make_store

NODES = ("g1", "g2")


class Owners:
    """pid -> workload id, as the real Attributor finds it from GPUPOOL_WORKLOAD_ID."""

    def __init__(self) -> None:
        self.of: dict[int, str] = {}

    def attribute_all(self, pids):
        return {
            p: Attribution(p, Via.ENV if p in self.of else Via.NONE, self.of.get(p)) for p in pids
        }


@dataclass
class Gang:
    world: World
    sources: dict[str, SimulatedSource]
    owners: Owners

    def loop(self, name: str):
        loop = self.world.ctx.loops.get(name)
        assert loop is not None, name
        return loop

    @property
    def culler(self) -> CullerLoop:
        loop = self.loop("culler")
        assert isinstance(loop, CullerLoop)
        return loop

    @property
    def accounting(self) -> AccountingLoop:
        loop = self.loop("accounting")
        assert isinstance(loop, AccountingLoop)
        return loop

    def sample(self) -> None:
        for node in NODES:
            loop = self.loop(f"telemetry-{node}")
            assert isinstance(loop, TelemetryLoop)
            loop.run_once()

    def start(self) -> str:
        """A 2 nodes x 2 GPUs job, running on g1 (rank 0) and g2."""
        w = self.world.submit(nodes=2, gpus_per_node=2)
        self.world.scheduler.run_once()
        with self.world.ctx.store.read() as s:
            a = AllocationRepo(s).active_for(w["id"])
        assert a is not None and a.nodes == NODES
        return w["id"]

    def util(self, node: str, pct: float) -> None:
        for i in range(2):
            self.sources[node].set_utilization(i, pct)


@pytest.fixture(params=DB_PARAMS)
def gang(request, tmp_path):
    """The system with two simulated nodes of 2 H100s each, sampled here (no n1)."""
    gen = make_store(request.param, tmp_path)
    store = next(gen)
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    sources = {n: SimulatedSource("2xH100-80GB", clock=clock, hostname=n) for n in NODES}
    nodes = [
        Node(
            n, tuple(g.to_domain() for g in src.snapshot().gpus), cpu_milli=16000, memory_mib=65536
        )
        for n, src in sources.items()
    ]
    engine = FakeEngine(executor, nodes=nodes, sources=list(sources.values()))
    settings = Settings(database_url=store.url, start_loops=False)
    system = build_system(SystemSettings(server=settings), engine, clock=clock, store=store)
    ctx = system.ctx
    seed(ctx)
    owners = Owners()
    with ctx.store.write() as s:
        NodeRepo(s).delete("n1")
        TenantRepo(s).save(Tenant("lab", Quota.gpus(4, 4), idle_timeout_s=3600), clock.now())
    for n in NODES:
        ctx.loops.get(f"telemetry-{n}").sampler.attributor = owners
    with serving(system, clock, executor) as world:
        yield Gang(world, sources, owners)
    gen.close()


def test_a_gang_idle_on_every_node_is_culled(gang):
    wid = gang.start()
    gang.util("g1", 0)
    gang.util("g2", 0)
    gang.sample()
    gang.world.clock.advance(3000)
    gang.sample()
    assert gang.culler.run_once().warned == [wid]
    gang.world.clock.advance(600)
    gang.sample()
    report = gang.culler.run_once()
    assert list(report.culled) == [wid] and "idle for 1.0 h" in report.culled[wid]


def test_a_gang_busy_on_another_node_than_rank_0_is_not_culled(gang):
    wid = gang.start()
    gang.util("g1", 0)  # rank 0 idles (waiting on rank 1, say)
    gang.util("g2", 90)
    gang.sample()
    gang.world.clock.advance(7200)
    gang.sample()
    report = gang.culler.run_once()
    assert report.culled == {} and report.warned == []
    # rank 1 stops too: idle counts from then, not from when rank 0 went quiet
    gang.util("g2", 0)
    gang.sample()
    gang.world.clock.advance(3599)
    gang.sample()
    assert gang.culler.run_once().culled == {}
    gang.world.clock.advance(1)
    gang.sample()
    assert list(gang.culler.run_once().culled) == [wid]


def test_a_gang_with_a_node_nobody_samples_is_never_culled(gang):
    """No evidence from one node (its loop has not sampled yet): never culled."""
    wid = gang.start()
    gang.util("g1", 0)
    gang.loop("telemetry-g1").run_once()
    gang.world.clock.advance(10_000)
    gang.loop("telemetry-g1").run_once()
    assert gang.culler.run_once().culled == {}
    assert gang.world.get("admin", f"/workloads/{wid}").json()["state"] == "running"


def test_accounting_counts_busy_and_memory_on_every_node(gang):
    wid = gang.start()
    gang.util("g1", 20)
    gang.util("g2", 60)
    gang.sources["g1"].add_process(0, 101, memory_mib=1000)
    gang.sources["g2"].add_process(1, 201, memory_mib=3000)
    gang.owners.of.update({101: wid, 201: wid})
    gang.sample()
    acc = gang.accounting
    acc.run_once()  # opens the books
    gang.world.clock.advance(100)
    gang.sample()
    acc.run_once()
    with gang.world.ctx.store.read() as s:
        (row,) = [u for u in UsageRepo(s).rollup("workload") if u.key == wid]
    secs = row.gpu_seconds_allocated / 4
    assert secs == pytest.approx(100)
    # 4 GPUs: 2 at 20% and 2 at 60% -> 40% busy
    assert row.gpu_seconds_busy == pytest.approx(4 * secs * 0.4)
    assert row.gpu_memory_mib_max == 4000
    assert row.gpu_memory_mib_seconds == pytest.approx(4000 * secs)
