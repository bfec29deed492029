"""Busy time of MPS shares (issue: the H200 check saw 0 busy and 0 measured GPU-hours for
two half-GPU MPS jobs that burned the GPU). NVML reports MPS work under the MPS server's pid;
the clients are listed with no SM use of their own, or not at all. The telemetry loop then
splits the server's (else the GPU's) use over the MPS shares by size and says it is an
estimate; the accounting loop records those seconds as estimated, never as measured."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import Enforcement, Node, SharingMode
from gpupool.scheduler.types import SchedulerConfig
from gpupool.server.loops.accounting import AccountingLoop
from gpupool.server.loops.telemetry import TelemetryLoop
from gpupool.store import AllocationRepo, NodeRepo, UsageRepo
from gpupool.telemetry import Attribution, SimulatedSource, Via

SERVER = 900  # the MPS server's pid


class StubAttributor:
    """pid -> workload id; SERVER is gpupool's MPS server of the shared GPU."""

    def __init__(self, gpu: str) -> None:
        self.owners: dict[int, str] = {}
        self.gpu = gpu

    def attribute_all(self, pids):
        out = {}
        for p in pids:
            if p == SERVER:
                out[p] = Attribution(p, Via.SERVICE, service_gpu=self.gpu)
            else:
                out[p] = Attribution(
                    p, Via.ENV if p in self.owners else Via.NONE, self.owners.get(p)
                )
        return out


@pytest.fixture
def mps(world):
    """A node 'sim' with one simulated H100, shared, MPS-enforced; two half-GPU jobs on it."""
    src = SimulatedSource("1xH100-80GB", clock=world.clock, hostname="sim")
    with world.ctx.store.write() as s:
        repo = NodeRepo(s)
        repo.delete("n1")
        gpus = tuple(g.to_domain() for g in src.snapshot().gpus)
        repo.upsert(Node("sim", gpus, cpu_milli=8000, memory_mib=64000))
        repo.set_sharing(src.uuid(0), SharingMode.SHARED)
    world.ctx.settings = dataclasses.replace(
        world.ctx.settings, scheduler=SchedulerConfig(shared_enforcement=Enforcement.MPS)
    )
    attr = StubAttributor(src.uuid(0))
    loop = TelemetryLoop(world.ctx, src, node="sim", kill=lambda pid: None, attributor=attr)
    jobs = []
    for pid, sm in ((101, 40.0), (102, 20.0)):
        w = world.submit(gpu_fraction=0.5, gpu_memory_mib=10240)
        world.scheduler.run_once()
        jobs.append(w["id"])
        src.add_process(0, pid, memory_mib=4000, sm_util=sm, mps=True)
        attr.owners[pid] = w["id"]
    with world.ctx.store.read() as s:
        allocs = [AllocationRepo(s).active_for(w) for w in jobs]
    assert all(a.shares[0].enforcement is Enforcement.MPS for a in allocs)
    return src, loop, allocs


def test_simulated_mps_reports_the_work_under_the_server():
    src = SimulatedSource("1xH100-80GB")
    src.add_process(0, 101, memory_mib=4000, sm_util=40, mps=True)
    src.add_process(0, 102, memory_mib=2000, sm_util=20, mps=True)
    src.serve_mps(0, SERVER)
    procs = {p.pid: p for p in src.snapshot().processes}
    assert procs[SERVER].sm_util == 60 and procs[101].sm_util == procs[102].sm_util == 0
    src.serve_mps(0, SERVER, clients_listed=False)
    snap = src.snapshot()
    assert [p.pid for p in snap.processes] == [SERVER]
    assert snap.processes[0].used_memory_mib == 6000 and snap.gpus[0].util_gpu == 60


@pytest.mark.parametrize("listed", [True, False])
def test_mps_clients_get_the_servers_work_split_by_share_as_an_estimate(mps, listed):
    src, loop, allocs = mps
    src.serve_mps(0, SERVER, clients_listed=listed)
    loop.run_once()
    for a in allocs:  # 60 % of the GPU split over two halves: 30 % each, 0.6 of a half
        assert loop.busy_fraction(a) == pytest.approx(0.6)
        assert loop.estimated_fraction(a) == 1.0


def test_over_a_window_the_servers_mean_is_split(world, mps):
    src, loop, allocs = mps
    src.serve_mps(0, SERVER)
    t0 = world.clock.now()
    loop.run_once()  # server at 60 %
    world.clock.advance(10)
    src.set_process(0, 101, sm_util=0.0)
    src.add_process(0, 102, memory_mib=4000, sm_util=0.0, mps=True)
    loop.run_once()  # server at 0 %
    assert loop.busy_fraction(allocs[0]) == 0.0  # the latest sample alone
    for a in allocs:  # the window's mean, 30 %, split: 15 % of the GPU, 0.3 of a half
        assert loop.busy_fraction(a, since=t0) == pytest.approx(0.3)
        assert loop.estimated_fraction(a, since=t0) == 1.0


def test_an_ended_share_keeps_the_estimates_of_its_window(world, mps):
    src, loop, allocs = mps  # the accounting pass after an end: no holder in the frame now
    src.serve_mps(0, SERVER)
    t0 = world.clock.now()
    loop.run_once()  # 60 % split: 30 % each
    for a in allocs:
        world.delete("admin", f"/workloads/{a.workload_id}")
    src.remove_process(101)
    src.remove_process(102)
    world.clock.advance(5)
    loop.run_once()
    for a in allocs:
        assert loop.busy_fraction(a, since=t0) == pytest.approx(0.6)
        assert loop.estimated_fraction(a, since=t0) == 1.0


def test_without_per_process_figures_the_gpus_utilization_is_split(mps):
    src, loop, allocs = mps
    src.serve_mps(0, SERVER, clients_listed=False)
    src.fail(0, "process_utilization")
    src.set_utilization(0, 90.0)
    loop.run_once()
    for a in allocs:  # 45 % each, capped at the half it holds
        assert loop.busy_fraction(a) == pytest.approx(0.9)
        assert loop.estimated_fraction(a) == 1.0


def test_clients_nvml_measures_stay_measured(mps):
    src, loop, allocs = mps  # no MPS server in NVML's view: each client has its own SM use
    loop.run_once()
    assert loop.busy_fraction(allocs[0]) == pytest.approx(0.8)
    assert loop.busy_fraction(allocs[1]) == pytest.approx(0.4)
    assert loop.estimated_fraction(allocs[0]) == loop.estimated_fraction(allocs[1]) == 0.0


def test_an_idle_mps_gpu_is_an_estimated_zero_not_unknown(mps):
    src, loop, allocs = mps
    src.set_process(0, 101, sm_util=0.0)
    src.add_process(0, 102, memory_mib=4000, sm_util=0.0, mps=True)
    src.serve_mps(0, SERVER, clients_listed=False)
    loop.run_once()
    assert loop.busy_fraction(allocs[0]) == 0.0 and loop.estimated_fraction(allocs[0]) == 1.0


def test_accounting_records_estimated_not_measured_seconds(world, mps):
    src, loop, allocs = mps
    src.serve_mps(0, SERVER, clients_listed=False)
    acc = AccountingLoop(
        world.ctx,
        loop.busy_fraction,
        loop.memory_mib,
        estimated_fraction=loop.estimated_fraction,
    )
    loop.run_once()
    acc.run_once()
    world.clock.advance(100)
    loop.run_once()
    acc.run_once()
    with world.ctx.store.read() as s:
        rows = {u.key: u for u in UsageRepo(s).rollup("workload")}
    for a in allocs:
        r = rows[a.workload_id]
        assert r.gpu_seconds_allocated > 0 and r.gpu_seconds_measured == 0
        assert r.gpu_seconds_estimated == pytest.approx(r.gpu_seconds_allocated)
        assert r.gpu_seconds_busy == pytest.approx(0.6 * r.gpu_seconds_allocated)
        assert r.efficiency == pytest.approx(0.6)
    report = world.get("admin", "/usage/chargeback", params={"by": "user"}).json()
    total = report["total"]
    assert total["gpu_hours_measured"] == 0
    assert total["gpu_hours_estimated"] == pytest.approx(total["gpu_hours_allocated"])
    assert total["gpu_hours_busy"] == pytest.approx(0.6 * total["gpu_hours_allocated"])
