"""The dashboard's plain-data views: cluster map, tenant live numbers, GPU history."""

from __future__ import annotations

from gpupool.clock import ManualClock
from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    GPUHealth,
    Node,
    Request,
    Share,
    SharingMode,
    Workload,
    WorkloadState,
)
from gpupool.telemetry import Sampler, SimulatedSource
from gpupool.web.page_data import cluster_view, gpu_history_view, tenant_live_view


def _node(name: str = "n1", n: int = 4, health: GPUHealth = GPUHealth.HEALTHY) -> Node:
    gpus = tuple(
        GPU(
            i,
            f"GPU-{name}-{i}",
            "H100",
            81559,
            sharing=SharingMode.SHARED if i == 1 else SharingMode.EXCLUSIVE,
            health=health if i == 3 else GPUHealth.HEALTHY,
        )
        for i in range(n)
    )
    return Node(name, gpus)


def _running(node: Node, wid: str, gpu: int, milli: int, tenant: str = "lab/a", user: str = "ann"):
    g = node.gpu(gpu)
    w = Workload(
        wid,
        tenant,
        user,
        Request(gpus=1) if milli == 1000 else Request(gpu_milli=milli),
        state=WorkloadState.RUNNING,
    )
    enf = Enforcement.HARDWARE if milli == 1000 else Enforcement.POLICED
    a = Allocation(wid, node.name, (Share(node.name, gpu, g.uuid, milli, 1000, enf),), since=5.0)
    return w, a


def test_cluster_view_without_telemetry_marks_free_busy_down():
    node = _node(health=GPUHealth.UNHEALTHY)
    running = [_running(node, "w-1", 0, 1000), _running(node, "w-2", 1, 250, user="bob")]
    v = cluster_view([node], running, now=100.0)
    gpus = v["nodes"][0]["gpus"]
    assert [g["status"] for g in gpus] == ["busy", "busy", "free", "down"]
    assert gpus[1]["holders"][0] == {
        "workload": "w-2",
        "kind": "job",
        "user": "bob",
        "tenant": "lab/a",
        "state": "running",
        "milli": 250,
        "memory_mib": 1000,
        "enforcement": "policed",
        "since": 5.0,
    }
    assert gpus[0]["util"] is None and gpus[0]["simulated"] is False
    assert v["summary"] == {
        "gpus": 4,
        "free": 1,
        "busy": 2,
        "idle": 0,
        "down": 1,
        "outside": 0,
        "allocated_milli": 1250,
    }
    assert v["simulated"] is False


def test_cluster_view_uses_telemetry_for_readings_and_idle():
    clock = ManualClock(1000.0)
    src = SimulatedSource("2xH100-80GB", clock=clock, hostname="sim")
    src.set_utilization(0, 97.0)
    src.set_utilization(1, 0.0)
    sampler = Sampler(src, clock=clock)
    frame = sampler.sample_once()
    uuids = [g.uuid for g in frame.snapshot.gpus]
    node = Node("sim", tuple(GPU(i, u, "H100", 81559) for i, u in enumerate(uuids)))
    running = [_running(node, "w-1", 0, 1000), _running(node, "w-2", 1, 1000)]
    v = cluster_view([node], running, [frame], now=clock.now())
    g0, g1 = v["nodes"][0]["gpus"]
    assert g0["status"] == "busy" and g0["util"] == 97.0 and g0["simulated"] is True
    assert g1["status"] == "idle"
    assert g0["memory_total_mib"] == 81559 and g0["temperature_c"] is not None
    assert v["simulated"] is True


def test_tenant_live_view_rolls_busy_up_the_tree():
    clock = ManualClock(0.0)
    src = SimulatedSource("2xH100-80GB", clock=clock, hostname="sim")
    src.set_utilization(0, 50.0)
    src.set_utilization(1, 100.0)
    frame = Sampler(src, clock=clock).sample_once()
    uuids = [g.uuid for g in frame.snapshot.gpus]
    node = Node("sim", tuple(GPU(i, u, "H100", 81559) for i, u in enumerate(uuids)))
    running = [
        _running(node, "w-1", 0, 1000, tenant="lab/a"),
        _running(node, "w-2", 1, 500, tenant="lab/b"),
    ]
    v = tenant_live_view(
        ["lab", "lab/a", "lab/b", "other"], running, [frame], {"lab/a": 1500, "lab/b": 500}
    )
    assert v["lab/a"] == {"fair_share_milli": 1500, "busy_milli": 500}
    assert v["lab/b"] == {"fair_share_milli": 500, "busy_milli": 500}
    assert v["lab"] == {"fair_share_milli": 2000, "busy_milli": 1000}
    assert v["other"] == {"fair_share_milli": None, "busy_milli": 0}


def test_gpu_history_view_puts_every_gpu_on_one_time_grid():
    clock = ManualClock(10_000.0)
    src = SimulatedSource("2xA100-40GB", clock=clock, hostname="sim")
    sampler = Sampler(src, clock=clock)
    for i in range(7200):  # two hours at 1 s
        src.set_utilization(0, float(i % 100))
        src.set_utilization(1, 50.0)
        sampler.sample_once()
        clock.advance(1.0)
    u0, u1 = list(sampler.gpus)
    gpus = [("sim", u0, 0, "A100"), ("sim", u1, 1, "A100")]
    fine = {u: sampler.gpu_history(u) for u in (u0, u1)}
    hour = gpu_history_view(gpus, fine, now=clock.now(), range_s=3600, buckets=100)
    assert len(hour["t"]) == 100 and hour["t"] == sorted(hour["t"])
    assert hour["t"][0] >= clock.now() - 3600 and hour["t"][-1] <= clock.now()
    s0, s1 = hour["series"]
    assert s0["label"] == "sim/0 A100" and len(s0["util"]) == len(s1["util"]) == 100
    assert all(0 <= u <= 99 for u in s0["util"])
    assert set(s1["util"]) == {50.0}
    minutes = {u: sampler.gpu_history(u, per_minute=True) for u in (u0, u1)}
    day = gpu_history_view(gpus, minutes, now=clock.now(), range_s=86400, buckets=240)
    filled = [u for u in day["series"][1]["util"] if u is not None]
    # two hours of a day in 6-minute slots: about 20 slots hold data, the rest are gaps
    assert 19 <= len(filled) <= 21 and day["series"][1]["util"][0] is None
    assert day["covered_from"] < clock.now() - 3600
    empty = gpu_history_view([("sim", "GPU-x", 1, "A100")], {}, now=clock.now(), range_s=3600)
    assert set(empty["series"][0]["util"]) == {None} and empty["covered_from"] is None
