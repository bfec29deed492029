"""Simulated GPUs: the spec, scripting processes and load, failures, the simulated flag."""

from __future__ import annotations

import json

import pytest

from gpupool.clock import ManualClock
from gpupool.telemetry import SimulatedSource, SpecError, open_source, parse_spec
from gpupool.telemetry.snapshots import MIB


def test_spec_lists_gpus_in_order_with_model_names_and_memory():
    gpus = parse_spec("4xH100-80GB,2xA100-40GB")
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 4 + ["NVIDIA A100-SXM4-40GB"] * 2
    assert gpus[0].memory_mib == 81559 and gpus[-1].memory_mib == 40960


def test_spec_defaults_and_unknown_models_with_memory():
    assert [g.name for g in parse_spec("H100, 2xA100")] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-SXM4-40GB",
    ]
    (g,) = parse_spec("RTX6000-48GB")
    assert (g.name, g.memory_mib) == ("NVIDIA RTX6000", 48 * 1024)


@pytest.mark.parametrize(
    "spec, hint",
    [
        ("", "e.g. 4xH100-80GB"),
        ("4x", "e.g. 4xH100-80GB"),
        ("H100-80", "e.g. 4xH100-80GB"),
        ("0xH100-80GB", "count must be 1..64"),
        ("RTX6000", "give the memory"),
        ("2xH100-80GB,,A100", "e.g. 4xH100-80GB"),
        ("H100-0GB", "memory must be"),
    ],
)
def test_bad_spec_is_a_clear_error(spec, hint):
    with pytest.raises(SpecError, match=hint):
        parse_spec(spec)


def test_every_snapshot_is_flagged_simulated_with_stable_uuids():
    a = SimulatedSource("2xH100-80GB", hostname="n1").snapshot()
    b = SimulatedSource("2xH100-80GB", hostname="n1").snapshot()
    c = SimulatedSource("2xH100-80GB", hostname="n2").snapshot()
    assert a.simulated and all(g.simulated for g in a.gpus)
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]
    assert len({g.uuid for g in a.gpus + c.gpus}) == 4
    assert open_source("H100").simulated


def test_scripted_processes_drive_memory_and_utilization():
    clock = ManualClock(5.0)
    sim = SimulatedSource("2xH100-80GB", clock=clock)
    sim.add_process(0, 111, memory_mib=1000, sm_util=30)
    sim.add_process(0, 222, memory_mib=500, sm_util=90, mps=True)
    g = sim.snapshot().gpus[0]
    assert g.timestamp == 5.0
    assert g.memory_used_bytes == 1500 * MIB
    assert g.memory_free_bytes == (81559 - 1500) * MIB
    assert g.util_gpu == 100.0  # 30 + 90, capped
    assert {p.pid: (p.kind, p.sm_util) for p in g.processes} == {
        111: ("compute", 30),
        222: ("mps", 90),
    }
    sim.set_process(0, 222, sm_util=10)
    assert sim.snapshot().gpus[0].util_gpu == 40.0
    sim.set_utilization(0, 3.0)
    assert sim.snapshot().gpus[0].util_gpu == 3.0
    sim.remove_process(111)
    assert [p.pid for p in sim.snapshot().gpus[0].processes] == [222]


def test_failures_give_none_and_a_lost_gpu_stays_listed():
    sim = SimulatedSource("2xA100-40GB")
    sim.fail(0, "power")
    sim.fail(0, "process_utilization")
    sim.add_process(0, 7, 100, 50)
    sim.fail(1, "lost")
    a, b = sim.snapshot().gpus
    assert a.power_w is None and a.healthy and a.errors
    assert a.processes[0].sm_util is None
    assert (b.healthy, b.uuid) == (False, sim.uuid(1))
    sim.heal(1)
    assert sim.snapshot().gpus[1].healthy
    with pytest.raises(ValueError, match="cannot fail"):
        sim.fail(0, "fan")
    with pytest.raises(IndexError, match="GPUs 0..1"):
        sim.add_process(5, 1)


def test_snapshot_json_says_simulated():
    data = json.loads(json.dumps(SimulatedSource("T4").snapshot().to_dict()))
    assert data["simulated"] is True and data["gpus"][0]["simulated"] is True
    assert data["gpus"][0]["name"] == "Tesla T4"


def test_clocks_follow_load_and_energy_counts_up_with_power():
    clock = ManualClock(1000.0)
    sim = SimulatedSource("H100", clock=clock)
    idle = sim.snapshot().gpus[0]
    assert (idle.sm_clock_mhz, idle.mem_clock_mhz, idle.energy_mj) == (345.0, 2619.0, 0)
    sim.set_utilization(0, 100.0)
    sim.set_sensors(0, power_w=500.0)
    clock.advance(2.0)
    busy = sim.snapshot().gpus[0]
    assert busy.sm_clock_mhz == 1980.0
    assert busy.energy_mj == 1_000_000  # 500 W for 2 s = 1 kJ = 1e6 mJ
    sim.fail(0, "clocks")
    sim.fail(0, "energy")
    failed = sim.snapshot().gpus[0]
    assert failed.sm_clock_mhz is None and failed.energy_mj is None and failed.healthy
