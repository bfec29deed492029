"""The cluster view of a GPU cut by a MIG layout: its instances, who holds each, and the
memory each MIG device uses (simulated telemetry)."""

from __future__ import annotations

from gpupool.clock import ManualClock
from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    Node,
    Request,
    Share,
    SharingMode,
    Workload,
    WorkloadState,
)
from gpupool.telemetry import Sampler, SimulatedSource
from gpupool.web.page_data import cluster_view


def test_instances_with_holders_and_per_device_memory():
    src = SimulatedSource("1xH100-80GB:mig=all-3g.40gb", clock=ManualClock(10.0), hostname="n1")
    src.add_process(0, 77, memory_mib=3072, mig_start=4)
    frame = Sampler(src, clock=src.clock).sample_once()
    snap = src.snapshot().gpus[0]
    gpu = GPU(0, snap.uuid, snap.name, 81559, SharingMode.MIG, mig_layout="all-3g.40gb")
    node = Node("n1", (gpu,))
    w = Workload("w1", "lab/a", "ann", Request(mig="3g.40gb"), state=WorkloadState.RUNNING)
    share = Share("n1", 0, gpu.uuid, 428, 39936, Enforcement.HARDWARE, "3g.40gb", 4)
    view = cluster_view([node], [(w, Allocation("w1", "n1", (share,), 5.0))], [frame], now=10.0)
    (g,) = view["nodes"][0]["gpus"]
    assert g["mig_layout"] == "all-3g.40gb"
    assert [(i["start"], i["workload"], i["memory_used_mib"]) for i in g["mig_instances"]] == [
        (0, None, 0),
        (4, "w1", 3072),
    ]
    assert g["holders"][0]["mig_profile"] == "3g.40gb" and g["holders"][0]["mig_start"] == 4
