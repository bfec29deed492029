"""The NVML wrapper against a fake pynvml: discovery and every N/A-safe path."""

from __future__ import annotations

import pytest
from telemetry_fakes import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGPU,
    FakeNVML,
)

from gpupool.clock import ManualClock
from gpupool.telemetry import NoGPUError, ProcessKind
from gpupool.telemetry.nvml import NVMLSource


def _open(fake: FakeNVML, clock: ManualClock | None = None) -> NVMLSource:
    return NVMLSource.open(module=fake, clock=clock or ManualClock(100.0), hostname="node-1")


def test_discovers_gpus_with_identity_memory_and_sensors(fake_nvml):
    snap = _open(fake_nvml).snapshot()
    assert (snap.hostname, snap.timestamp, snap.simulated) == ("node-1", 100.0, False)
    assert snap.driver_version == "580.1" and snap.cuda_version == "13.0"
    assert snap.nvml_version == "13.580.1"
    a, b = snap.gpus
    assert (a.index, a.uuid, a.name, a.healthy) == (0, "GPU-aaaa", "NVIDIA H100 80GB HBM3", True)
    assert b.name == "NVIDIA A100-SXM4-40GB" and b.memory_total_bytes == 40 * 2**30
    # v2 memory info: used excludes the driver's reserved memory
    assert a.memory_used_bytes == 2**30 and a.memory_reserved_bytes == 512 * 2**20
    assert (a.util_gpu, a.util_memory, a.temperature_c) == (37.0, 12.0, 41.0)
    assert (a.power_w, a.power_limit_w) == (250.0, 700.0)
    # the DCGM dashboard's clocks (MHz) and energy (mJ, as NVML and DCGM both count it)
    assert (a.sm_clock_mhz, a.mem_clock_mhz, a.energy_mj) == (1980.0, 2619.0, 123_456_789)
    assert a.pci_bus_id == "00000000:18:00.0" and a.device == "nvidia0"
    assert a.mig_enabled is False and a.errors == ()


def test_processes_merge_compute_and_mps_lists_with_memory_and_sm_util(fake_nvml):
    procs = {p.pid: p for p in _open(fake_nvml).snapshot().gpus[0].processes}
    assert procs[100].kind is ProcessKind.COMPUTE
    assert procs[100].used_memory_bytes == 3 * 2**30
    assert procs[101].kind is ProcessKind.MPS and procs[101].used_memory_bytes is None
    # first read keeps the newest second of NVML's buffer: 100 -> mean(50, 70), 101 -> 10
    assert procs[100].sm_util == 60.0 and procs[101].sm_util == 10.0


def test_process_utilization_is_held_between_sparse_samples_then_expires(fake_nvml):
    # NVML samples processes sparsely: a read may hold no new sample for a busy process.
    clock = ManualClock(100.0)
    src = _open(fake_nvml, clock)
    src.snapshot()
    fake_nvml.gpus[0].samples.append((100, 2_600_000, 90))
    clock.advance(5)
    procs = {p.pid: p for p in src.snapshot().gpus[0].processes}
    assert procs[100].sm_util == 90.0  # only the newer sample counts
    assert procs[101].sm_util == 10.0  # no new sample: last value, 1.0 s old, is held
    clock.advance(5)
    procs = {p.pid: p for p in src.snapshot().gpus[0].processes}  # NOT_FOUND: nothing new
    assert (procs[100].sm_util, procs[101].sm_util) == (90.0, 10.0)
    fake_nvml.gpus[0].samples.append((100, 5_000_000, 30))
    clock.advance(5)
    procs = {p.pid: p for p in src.snapshot().gpus[0].processes}
    assert procs[100].sm_util == 30.0
    assert procs[101].sm_util == 0.0  # its last sample is over 3 s older than the newest


def test_expensive_calls_are_rate_limited_and_skipped_on_gpus_without_processes(fake_nvml):
    clock = ManualClock(100.0)
    src = _open(fake_nvml, clock)
    for _ in range(5):  # five 1-second samples
        src.snapshot()
        clock.advance(1)
    util_calls = fake_nvml.calls.count("nvmlDeviceGetProcessUtilization")
    assert util_calls == 1  # GPU 0 at t=100 only (next due at 105); GPU 1 has no processes
    assert fake_nvml.calls.count("nvmlDeviceGetMigMode") == 2  # once per GPU per minute
    fake_nvml.gpus[0].samples.append((100, 9_000_000, 77))
    procs = {p.pid: p.sm_util for p in src.snapshot().gpus[0].processes}  # t=105: due
    assert procs[100] == 77.0
    assert fake_nvml.calls.count("nvmlDeviceGetProcessUtilization") == 2


def test_passing_process_utilization_error_is_retried(fake_nvml):
    clock = ManualClock(100.0)
    fake_nvml.fail("nvmlDeviceGetProcessUtilization", UNKNOWN)
    src = _open(fake_nvml, clock)
    g = src.snapshot().gpus[0]
    assert g.processes[0].sm_util is None and "process utilization" in g.errors[0]
    del fake_nvml.failures[("nvmlDeviceGetProcessUtilization", None)]
    clock.advance(5)
    assert src.snapshot().gpus[0].processes[0].sm_util == 60.0


def test_process_utilization_not_supported_is_none(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetProcessUtilization", NOT_SUPPORTED)
    g = _open(fake_nvml).snapshot().gpus[0]
    assert all(p.sm_util is None for p in g.processes) and g.errors == ()


@pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
def test_unsupported_or_missing_driver_function_is_na_without_error(fake_nvml, code):
    fake_nvml.fail("nvmlDeviceGetPowerUsage", code, gpu=0)
    fake_nvml.fail("nvmlDeviceGetTemperature", code, gpu=1)
    fake_nvml.fail("nvmlDeviceGetTotalEnergyConsumption", code, gpu=0)  # e.g. before Volta
    fake_nvml.fail("nvmlDeviceGetClockInfo", code, gpu=1)
    a, b = _open(fake_nvml).snapshot().gpus
    assert a.power_w is None and a.energy_mj is None and a.healthy and a.errors == ()
    assert a.sm_clock_mhz == 1980.0
    assert b.temperature_c is None and b.power_w == 250.0 and b.healthy
    assert b.sm_clock_mhz is None and b.mem_clock_mhz is None and b.energy_mj == 123_456_789


def test_function_absent_from_old_binding_is_na(fake_nvml):
    fake_nvml.remove("nvmlDeviceGetMPSComputeRunningProcesses")
    fake_nvml.remove("nvmlDeviceGetMigMode")
    g = _open(fake_nvml).snapshot().gpus[0]
    assert g.mig_enabled is None and g.errors == ()
    assert {p.pid: p.kind for p in g.processes} == {100: "compute", 101: "compute"}


def test_memory_v2_unsupported_falls_back_to_v1(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetMemoryInfo_v2", NOT_SUPPORTED)
    g = _open(fake_nvml).snapshot().gpus[0]
    assert g.memory_used_bytes == 2**30 + 512 * 2**20 and g.memory_reserved_bytes is None
    assert g.errors == ()


def test_other_nvml_error_gives_none_and_is_recorded(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetTemperature", UNKNOWN, gpu=0)
    a, b = _open(fake_nvml).snapshot().gpus
    assert a.temperature_c is None and a.healthy
    assert a.errors == ("temperature: Unknown Error",)
    assert b.temperature_c == 41.0


def test_lost_gpu_stays_listed_unhealthy_with_its_identity(fake_nvml):
    src = _open(fake_nvml)
    src.snapshot()
    fake_nvml.fail("nvmlDeviceGetUtilizationRates", GPU_IS_LOST, gpu=1)
    a, b = src.snapshot().gpus
    assert a.healthy
    assert (b.healthy, b.uuid, b.name) == (False, "GPU-bbbb", "NVIDIA A100-SXM4-40GB")
    assert "GPU is lost" in b.errors[0]
    assert b.memory_total_bytes is None and b.processes == ()


def test_gpu_that_vanishes_from_the_count_stays_listed_unhealthy(fake_nvml):
    src = _open(fake_nvml)
    src.snapshot()
    fake_nvml.gpus.pop()
    gpus = src.snapshot().gpus
    assert [(g.uuid, g.healthy) for g in gpus] == [("GPU-aaaa", True), ("GPU-bbbb", False)]


def test_gpu_whose_handle_fails_before_first_sight_is_listed_unknown(fake_nvml):
    fake_nvml.fail("nvmlDeviceGetHandleByIndex", UNKNOWN, gpu=1)
    b = _open(fake_nvml).snapshot().gpus[1]
    assert (b.healthy, b.uuid) == (False, "GPU-unknown-1")
    assert "handle" in b.errors[0]


def test_device_count_failure_is_a_host_error_not_a_crash(fake_nvml):
    src = _open(fake_nvml)
    src.snapshot()
    fake_nvml.fail("nvmlDeviceGetCount", UNKNOWN)
    snap = src.snapshot()
    assert snap.errors and all(not g.healthy for g in snap.gpus) and len(snap.gpus) == 2


def test_no_driver_is_a_clear_error_suggesting_simulate():
    fake = FakeNVML([FakeGPU("GPU-x")])
    fake.init_error = LIBRARY_NOT_FOUND
    with pytest.raises(NoGPUError, match="--simulate"):
        _open(fake)


def test_no_gpu_is_a_clear_error():
    with pytest.raises(NoGPUError, match="no NVIDIA GPU"):
        _open(FakeNVML([]))


def test_mig_devices_and_their_processes_are_read():
    mig = [FakeGPU("MIG-1", total=10 * 2**30, compute=[(300, 2**30)]), FakeGPU("MIG-2")]
    fake = FakeNVML([FakeGPU("GPU-m", mig=mig)])
    g = _open(fake).snapshot().gpus[0]
    assert g.mig_enabled is True
    assert [(m.index, m.uuid, m.gpu_instance_id) for m in g.mig_devices] == [
        (0, "MIG-1", 1),
        (1, "MIG-2", 2),
    ]
    (p,) = [p for p in g.processes if p.pid == 300]
    assert p.mig_uuid == "MIG-1" and p.gpu_uuid == "GPU-m"


def test_close_shuts_nvml_down_once(fake_nvml):
    src = _open(fake_nvml)
    src.close()
    src.close()
    assert fake_nvml.shutdowns == 1


def test_snapshot_is_immutable_and_json_ready(fake_nvml):
    import dataclasses
    import json

    snap = _open(fake_nvml).snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.gpus[0].name = "x"  # type: ignore[misc]
    data = json.loads(json.dumps(snap.to_dict()))
    assert data["gpus"][0]["processes"][1]["kind"] == "mps"
