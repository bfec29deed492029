"""Policing detections and idle holders, with an injected clock."""

from __future__ import annotations

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Enforcement, Share
from gpupool.telemetry import Attribution, DetectionKind, Policer, PolicingConfig, Via
from gpupool.telemetry import SimulatedSource as Sim


def _owner(pid: int, wid: str | None, unix_user: str = "alice") -> Attribution:
    return Attribution(
        pid=pid, via=Via.ENV if wid else Via.UNIX_USER, workload_id=wid, unix_user=unix_user
    )


def _alloc(
    sim: Sim,
    wid: str,
    gpu: int,
    milli: int = 1000,
    mem: int = 81559,
    enf: Enforcement = Enforcement.POLICED,
) -> Allocation:
    return Allocation(wid, "n", (Share("n", gpu, sim.uuid(gpu), milli, mem, enf),), 0.0)


def _kinds(dets) -> list[tuple[str, str | None, tuple[int, ...]]]:
    return sorted((str(d.kind), d.workload_id, d.pids) for d in dets)


def test_process_on_a_gpu_its_workload_does_not_hold():
    clock = ManualClock()
    sim = Sim("2xH100-80GB", clock=clock)
    sim.add_process(1, 10, 1000, 50)  # w-1 holds GPU 0 but runs on GPU 1
    sim.add_process(0, 11, 1000, 50)  # w-2 holds nothing
    owners = {10: _owner(10, "w-1"), 11: _owner(11, "w-2")}
    dets = Policer(clock).check(sim.snapshot(), owners, [_alloc(sim, "w-1", 0)])
    assert _kinds(dets) == [("foreign_gpu", "w-1", (10,)), ("foreign_gpu", "w-2", (11,))]
    msgs = sorted(d.message for d in dets)
    assert "does not hold it" in msgs[0] and "holds no GPU" in msgs[1]


def test_unowned_process_on_an_allocated_gpu():
    clock = ManualClock()
    sim = Sim("2xH100-80GB", clock=clock)
    sim.add_process(0, 20, 500, 10)
    sim.add_process(1, 21, 500, 10)  # GPU 1 is not allocated: nothing to report
    owners = {20: _owner(20, None, "mallory"), 21: _owner(21, None)}
    (d,) = Policer(clock).check(sim.snapshot(), owners, [_alloc(sim, "w-1", 0)])
    assert (d.kind, d.pids, d.workload_id) == (DetectionKind.UNOWNED_ON_ALLOCATED, (20,), None)
    assert "mallory" in d.message and "w-1" in d.message


def test_over_memory_sums_the_workloads_processes_on_that_gpu():
    clock = ManualClock()
    sim = Sim("H100-80GB", clock=clock)
    sim.add_process(0, 30, 6000, 50)
    sim.add_process(0, 31, 6000, 50)
    owners = {30: _owner(30, "w-1"), 31: _owner(31, "w-1")}
    policer = Policer(clock)
    allocs = [_alloc(sim, "w-1", 0, milli=500, mem=10240)]
    (d,) = policer.check(sim.snapshot(), owners, allocs)
    assert (d.kind, d.pids, d.observed, d.limit) == (
        DetectionKind.OVER_MEMORY,
        (30, 31),
        12000.0,
        10240.0,
    )
    assert d.enforcement is Enforcement.POLICED and d.since == 0.0
    clock.advance(7)
    (d,) = policer.check(sim.snapshot(), owners, allocs)
    assert (d.since, d.duration_s) == (0.0, 7.0)  # the same condition, continuing
    sim.set_process(0, 31, memory_mib=4000)
    assert policer.check(sim.snapshot(), owners, allocs) == []


def test_idle_whole_gpu_is_reported_after_the_configured_time():
    clock = ManualClock(1000.0)
    sim = Sim("H100-80GB", clock=clock)
    sim.set_utilization(0, 0.0)
    policer = Policer(clock, PolicingConfig(idle_after_s=600, idle_util_pct=1.0))
    allocs = [_alloc(sim, "w-1", 0)]
    assert policer.check(sim.snapshot(), {}, allocs) == []
    clock.advance(599)
    assert policer.check(sim.snapshot(), {}, allocs) == []
    assert policer.idle_for("w-1", sim.uuid(0)) == 599
    clock.advance(1)
    (d,) = policer.check(sim.snapshot(), {}, allocs)
    assert (d.kind, d.workload_id, d.since, d.duration_s) == (
        DetectionKind.IDLE,
        "w-1",
        1000.0,
        600.0,
    )
    assert "for 600 s" in d.message
    # Busy again: the clock of idleness restarts from zero.
    sim.set_utilization(0, 55.0)
    assert policer.check(sim.snapshot(), {}, allocs) == []
    sim.set_utilization(0, 0.5)
    clock.advance(10)
    assert policer.check(sim.snapshot(), {}, allocs) == []
    assert policer.idle_for("w-1", sim.uuid(0)) == 0.0 or policer.idle_for("w-1", sim.uuid(0)) < 600


def test_unknown_utilization_is_never_idle():
    clock = ManualClock()
    sim = Sim("H100-80GB", clock=clock)
    sim.fail(0, "utilization")
    policer = Policer(clock, PolicingConfig(idle_after_s=0))
    assert policer.check(sim.snapshot(), {}, [_alloc(sim, "w-1", 0)]) == []
    sim.fail(0, "lost")
    assert policer.check(sim.snapshot(), {}, [_alloc(sim, "w-1", 0)]) == []


def test_fractional_share_idleness_uses_its_own_processes():
    clock = ManualClock()
    sim = Sim("H100-80GB", clock=clock)
    sim.add_process(0, 40, 1000, sm_util=0.0)  # w-1 idle
    sim.add_process(0, 41, 1000, sm_util=80.0)  # w-2 busy: the GPU is at 80%
    owners = {40: _owner(40, "w-1"), 41: _owner(41, "w-2")}
    allocs = [_alloc(sim, "w-1", 0, 500, 20000), _alloc(sim, "w-2", 0, 500, 20000)]
    (d,) = Policer(clock, PolicingConfig(idle_after_s=0)).check(sim.snapshot(), owners, allocs)
    assert (d.kind, d.workload_id, d.pids) == (DetectionKind.IDLE, "w-1", (40,))


def test_mps_clients_are_not_judged_idle_by_their_own_sm_figure():
    # Under MPS, NVML charges SM use to the MPS server; a client reads 0 even when busy.
    clock = ManualClock()
    sim = Sim("H100-80GB", clock=clock)
    sim.add_process(0, 50, 1000, sm_util=0.0, mps=True)
    sim.add_process(0, 51, 1000, sm_util=0.0, mps=True)
    sim.set_utilization(0, 90.0)
    owners = {50: _owner(50, "w-1"), 51: _owner(51, "w-2")}
    shared = [
        _alloc(sim, "w-1", 0, 500, 20000, Enforcement.MPS),
        _alloc(sim, "w-2", 0, 500, 20000, Enforcement.MPS),
    ]
    policer = Policer(clock, PolicingConfig(idle_after_s=0))
    assert policer.check(sim.snapshot(), owners, shared) == []
    # A sole MPS holder falls back on the whole GPU's utilization.
    sim.set_utilization(0, 0.0)
    sim.remove_process(51)
    (d,) = policer.check(sim.snapshot(), {50: owners[50]}, shared[:1])
    assert (d.kind, d.workload_id) == (DetectionKind.IDLE, "w-1")
