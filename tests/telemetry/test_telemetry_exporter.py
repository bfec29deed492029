"""The Prometheus exporter, parsed back with prometheus-client's own parser."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Share
from gpupool.telemetry import (
    Attribution,
    Policer,
    PolicingConfig,
    Sampler,
    SimulatedSource,
    TelemetryError,
    Via,
)
from gpupool.telemetry.exporter import render, serve
from gpupool.telemetry.sampler import Frame

DCGM = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
}
DCGM_LABELS = {
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
}


def _frame() -> tuple[SimulatedSource, Frame]:
    clock = ManualClock(0.0)
    sim = SimulatedSource("2xH100-80GB,A100-40GB", clock=clock, hostname="node-7")
    sim.add_process(0, 100, memory_mib=2048, sm_util=40)
    sim.add_process(0, 101, memory_mib=512, sm_util=5)
    sim.set_sensors(0, temperature_c=55, power_w=310.5)
    sim.fail(1, "power")
    sim.fail(2, "lost")
    owners = {
        100: Attribution(100, Via.ENV, "w-1", "alice", "physics/lab-a", "root", 0),
        101: Attribution(101, Via.UNIX_USER, unix_user="bob", uid=1001),
    }
    allocs = [Allocation("w-1", "node-7", (Share("node-7", 0, sim.uuid(0), 1000, 81559),), 0)]

    class Fixed:
        def attribute_all(self, pids):
            return {p: owners[p] for p in pids}

    sampler = Sampler(
        sim,
        clock=clock,
        attributor=Fixed(),  # type: ignore[arg-type]
        policer=Policer(clock, PolicingConfig(idle_after_s=0)),
        allocations=lambda: allocs,
    )
    return sim, sampler.sample_once()


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_dcgm_series_have_dcgm_names_labels_and_units():
    sim, frame = _frame()
    fams = _families(render(frame))
    assert set(fams) >= DCGM
    for name in DCGM:
        assert fams[name].type == "gauge"
        for s in fams[name].samples:
            assert set(s.labels) == DCGM_LABELS
    util = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert util["0"].value == 45.0
    assert util["0"].labels == {
        "gpu": "0",
        "UUID": sim.uuid(0),
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-7",
        "DCGM_FI_DRIVER_VERSION": "simulated",
    }
    fb_used = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    fb_free = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_FREE"].samples}
    assert fb_used["0"] == 2560.0 and fb_free["0"] == 81559 - 2560  # MiB, like DCGM
    temp = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_GPU_TEMP"].samples}
    power = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_POWER_USAGE"].samples}
    assert temp["0"] == 55.0 and power["0"] == 310.5
    assert "1" not in power  # N/A is left out, never reported as 0
    sm_clock = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_SM_CLOCK"].samples}
    mem_clock = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_MEM_CLOCK"].samples}
    energy = {
        s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples
    }
    assert (sm_clock["0"], mem_clock["0"], energy["0"]) == (1980.0, 2619.0, 0.0)  # MHz, mJ
    assert "2" not in util  # a lost GPU has no DCGM values


def test_gpupool_series_label_owners_and_flag_simulation():
    sim, frame = _frame()
    fams = _families(render(frame))
    info = fams["gpupool_gpu_info"].samples
    assert {s.labels["simulated"] for s in info} == {"true"} and len(info) == 3
    healthy = {s.labels["gpu"]: s.value for s in fams["gpupool_gpu_healthy"].samples}
    assert healthy == {"0": 1.0, "1": 1.0, "2": 0.0}
    mem = {s.labels["pid"]: s for s in fams["gpupool_gpu_process_memory_bytes"].samples}
    assert mem["100"].value == 2048 * 2**20
    assert {k: mem["100"].labels[k] for k in ("user", "tenant", "workload", "type")} == {
        "user": "alice",
        "tenant": "physics/lab-a",
        "workload": "w-1",
        "type": "compute",
    }
    assert (mem["101"].labels["user"], mem["101"].labels["workload"]) == ("bob", "")
    sm = {s.labels["pid"]: s.value for s in fams["gpupool_gpu_process_sm_util"].samples}
    assert sm == {"100": 40.0, "101": 5.0}
    dets = {s.labels["kind"]: s.value for s in fams["gpupool_policing_detections"].samples}
    assert dets["unowned_on_allocated"] == 1.0 and dets["idle"] == 0.0


def test_serves_metrics_over_http():
    _sim, frame = _frame()
    server = serve(lambda: frame, port=0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read().decode()
    finally:
        server.shutdown()
    assert set(_families(body)) >= DCGM


def test_nothing_sampled_yet_renders_empty():
    server = serve(lambda: None, port=0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics") as r:
            assert r.read() == b""
    finally:
        server.shutdown()


def test_busy_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(TelemetryError, match="choose another --port"):
            serve(lambda: None, port=s.getsockname()[1])


def test_metrics_app_renders_once_per_frame_and_404s_elsewhere():
    from gpupool.telemetry.exporter import MetricsApp

    _sim, frame = _frame()
    current = {"frame": frame}
    app = MetricsApp(lambda: current["frame"])
    first = app.body()
    assert app.body() is first  # same frame: the rendered bytes are reused
    _sim2, current["frame"] = _frame()
    assert app.body() is not first

    statuses = []
    out = app({"PATH_INFO": "/other"}, lambda status, headers: statuses.append(status))
    assert statuses == ["404 Not Found"] and b"/metrics" in out[0]
