"""MIG devices through NVML (profile from the device name, start from the GPU instance's
placement) and in the simulated source (`:mig=LAYOUT` in the spec)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from telemetry_fakes import FakeGPU, FakeNVML, Handle

from gpupool.clock import ManualClock
from gpupool.domain import SharingMode
from gpupool.telemetry.nvml import NVMLSource
from gpupool.telemetry.simulated import SimulatedSource, SpecError
from gpupool.telemetry.snapshots import mig_device_uuid


class PlacedNVML(FakeNVML):
    """FakeNVML whose GPU instances tell their placement (start = 4 * instance index)."""

    def nvmlDeviceGetGpuInstanceById(self, h: Handle, gi: int):  # noqa: N802
        return SimpleNamespace(gi=gi)

    def nvmlGpuInstanceGetInfo(self, gi):  # noqa: N802
        return SimpleNamespace(placement=SimpleNamespace(start=4 * (gi.gi - 1), size=4))


def test_nvml_mig_devices_carry_profile_and_start_and_form_a_layout():
    name = "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    mig = [FakeGPU("MIG-a", name=name), FakeGPU("MIG-b", name=name)]
    src = NVMLSource(clock=ManualClock(0.0), module=PlacedNVML([FakeGPU("GPU-m", mig=mig)]))
    g = src.snapshot().gpus[0]
    assert [(d.profile, d.start) for d in g.mig_devices] == [("3g.40gb", 0), ("3g.40gb", 4)]
    assert g.errors == ()
    assert g.mig_layout() == "all-3g.40gb"
    dom = g.to_domain()
    assert dom.sharing is SharingMode.MIG and dom.mig_layout == "all-3g.40gb"
    assert mig_device_uuid(g, "3g.40gb", 4) == "MIG-b"
    assert mig_device_uuid(g, "1g.10gb", 0) is None


def test_without_placement_reads_the_layout_is_unknown_but_not_an_error():
    mig = [FakeGPU("MIG-a", name="NVIDIA H100 80GB HBM3 MIG 1g.10gb")]
    src = NVMLSource(clock=ManualClock(0.0), module=FakeNVML([FakeGPU("GPU-m", mig=mig)]))
    g = src.snapshot().gpus[0]
    assert [(d.profile, d.start) for d in g.mig_devices] == [("1g.10gb", None)]
    assert g.errors == () and g.mig_layout() is None
    assert mig_device_uuid(g, "1g.10gb", 3) == "MIG-a"  # the only one of that profile


def test_simulated_mig_devices_follow_the_spec_and_processes_land_on_them():
    src = SimulatedSource("1xH100-80GB:mig=3g.40gb:1+1g.10gb:4,1xA100-40GB", hostname="h")
    src.add_process(0, 42, memory_mib=2048, mig_start=4)
    g0, g1 = src.snapshot().gpus
    assert g0.mig_enabled is True and g1.mig_enabled is False
    assert [(d.profile, d.start) for d in g0.mig_devices] == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]
    (p,) = g0.processes
    assert p.mig_uuid == src.mig_uuid(0, 4) == g0.mig_devices[4].uuid
    assert g0.mig_devices[4].memory_used_bytes == 2048 * 2**20
    src.set_mig(1, "all-2g.10gb")
    assert src.snapshot().gpus[1].mig_layout() == "all-2g.10gb"


@pytest.mark.parametrize(
    ("spec", "says"),
    [("1xH100-80GB:mig=all-1g.5gb", "no MIG profile 1g.5gb"), ("T4:mig=all-1g.10gb", "no MIG")],
)
def test_bad_simulated_mig_layouts_are_refused(spec, says):
    with pytest.raises(SpecError, match=says):
        SimulatedSource(spec)


def test_a_mig_instance_share_is_not_policed_for_memory():
    """The GPU holds a MIG instance to its memory; the nominal size gpupool records may be a
    little below what the device really has, so memory policing would kill work that is
    within its instance."""
    from gpupool.domain import Allocation, Enforcement, Share
    from gpupool.telemetry import Attribution, Policer, Via

    clock = ManualClock(0.0)
    src = SimulatedSource("1xH100-80GB:mig=all-1g.10gb", clock=clock)
    src.add_process(0, 30, memory_mib=10100, sm_util=50, mig_start=2)
    owners = {30: Attribution(pid=30, via=Via.ENV, workload_id="w-1", unix_user="a")}
    mig = Share("n", 0, src.uuid(0), 142, 9984, Enforcement.HARDWARE, "1g.10gb", 2)
    assert Policer(clock).check(src.snapshot(), owners, [Allocation("w-1", "n", (mig,), 0)]) == []
    plain = Share("n", 0, src.uuid(0), 142, 9984, Enforcement.POLICED)  # the old behaviour
    (d,) = Policer(clock).check(src.snapshot(), owners, [Allocation("w-1", "n", (plain,), 0)])
    assert d.kind.value == "over_memory"
