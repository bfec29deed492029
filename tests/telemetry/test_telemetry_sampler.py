"""The sampler: bounded rings, per-minute history, frames, listeners."""

from __future__ import annotations

import pytest
from telemetry_fakes import write_proc

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Share
from gpupool.telemetry import (
    WORKLOAD_ENV,
    Attributor,
    DetectionKind,
    Policer,
    PolicingConfig,
    Sampler,
    SimulatedSource,
)


def test_fine_ring_is_bounded_and_minutes_are_averaged():
    clock = ManualClock(0.0)
    sim = SimulatedSource("H100-80GB", clock=clock)
    sampler = Sampler(sim, clock=clock, gpu_fine_points=30, gpu_minutes=2)
    uuid = sim.uuid(0)
    for t in range(190):  # 0..189 s: minutes 0, 1, 2 complete, minute 3 open
        clock.set(float(t))
        sim.set_utilization(0, float(t // 60) * 10)  # 0, 10, 20, 30 by minute
        sampler.sample_once()
    fine = sampler.gpu_history(uuid)
    assert len(fine) == 30 and fine[0].t == 160.0 and fine[-1].t == 189.0
    coarse = sampler.gpu_history(uuid, per_minute=True)
    assert [(p.t, p.util) for p in coarse] == [(60.0, 10.0), (120.0, 20.0)]  # ring of 2
    assert coarse[0].memory_used_mib == 0.0 and coarse[0].power_w is not None


def test_process_history_and_forgetting_finished_processes():
    clock = ManualClock(0.0)
    sim = SimulatedSource("H100-80GB", clock=clock)
    sim.add_process(0, 7, memory_mib=100, sm_util=20)
    sampler = Sampler(sim, clock=clock, process_points=3, forget_process_after_s=10)
    for t in range(5):
        clock.set(float(t))
        sim.set_process(0, 7, memory_mib=100 + t)
        sampler.sample_once()
    pts = sampler.process_history(sim.uuid(0), 7)
    assert [(p.t, p.memory_mib, p.sm_util) for p in pts] == [
        (2.0, 102.0, 20),
        (3.0, 103.0, 20),
        (4.0, 104.0, 20),
    ]
    sim.remove_process(7)
    clock.set(14.0)
    sampler.sample_once()
    assert sampler.process_history(sim.uuid(0), 7)  # kept a while after it ended
    clock.set(15.0)
    sampler.sample_once()
    assert sampler.process_history(sim.uuid(0), 7) == []


def test_frame_carries_owners_and_detections_and_reaches_listeners(proc_root):
    clock = ManualClock(0.0)
    sim = SimulatedSource("2xH100-80GB", clock=clock)
    write_proc(proc_root, 500, env={WORKLOAD_ENV: "w-1"})
    sim.add_process(1, 500, 1000, 10)  # w-1 runs on GPU 1 but holds GPU 0
    allocs = [Allocation("w-1", "n", (Share("n", 0, sim.uuid(0), 1000, 81559),), 0.0)]
    seen = []
    sampler = Sampler(
        sim,
        clock=clock,
        attributor=Attributor(proc_root, resolve_workload={"w-1": ("alice", "lab")}),
        policer=Policer(clock, PolicingConfig(idle_after_s=0)),
        allocations=lambda: allocs,
    )
    sampler.on_frame(seen.append)
    frame = sampler.sample_once()
    assert seen == [frame] and sampler.latest is frame
    assert frame.owners[500].user == "alice"
    assert sorted(d.kind for d in frame.detections) == [
        DetectionKind.FOREIGN_GPU,
        DetectionKind.IDLE,  # GPU 0 is held and at 0%
    ]


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval"):
        Sampler(SimulatedSource("T4"), interval_s=0)


def test_run_samples_until_stopped_and_survives_a_failing_sample():
    import threading

    sim = SimulatedSource("T4")
    sampler = Sampler(sim, interval_s=0.001)
    stop = threading.Event()
    frames = []

    def listener(frame):
        frames.append(frame)
        if len(frames) == 2:
            raise RuntimeError("a broken listener")  # logged; the loop goes on
        if len(frames) == 4:
            stop.set()

    sampler.on_frame(listener)
    sampler.run(stop)  # ends because the listener sets `stop`, not on a timer
    assert len(frames) == 4 and sampler.latest is frames[-1]
