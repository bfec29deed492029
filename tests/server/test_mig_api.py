"""MIG through the API: a GPU's layout and instances, MIG requests, and the refusals (bad
layout, layout change under running work, MIG mode off as the telemetry reads it)."""

from __future__ import annotations

from gpupool.store import NodeRepo
from gpupool.telemetry.sampler import Sampler
from gpupool.telemetry.simulated import SimulatedSource

PROBLEM = "application/problem+json"


def _gpu(world, uuid: str) -> dict:
    r = world.get("member", f"/gpus/{uuid}")
    assert r.status_code == 200, r.text
    return r.json()


def test_admin_sets_a_layout_and_sees_its_instances(world) -> None:
    r = world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "mig", "mig_layout": "all-3g.40gb"})
    assert r.status_code == 200, r.text
    g = r.json()
    assert g["sharing"] == "mig" and g["mig_layout"] == "all-3g.40gb"
    assert [(i["profile"], i["start"], i["workload_id"]) for i in g["mig_instances"]] == [
        ("3g.40gb", 0, None),
        ("3g.40gb", 4, None),
    ]


def test_only_admins_change_layouts(world) -> None:
    for role in ("tenant-admin", "member", "viewer"):
        body = {"sharing": "mig", "mig_layout": "all-1g.10gb"}
        r = world.patch(role, "/gpus/GPU-n1-2", json=body)
        assert r.status_code == 403, (role, r.text)
    assert _gpu(world, "GPU-n1-2")["sharing"] == "exclusive"


def test_bad_layouts_are_refused_with_what_to_do(world) -> None:
    r = world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "mig", "mig_layout": "3g.40gb@2"})
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM)
    assert "needs start 0 or 4" in r.text
    r = world.patch("admin", "/gpus/GPU-n1-2", json={"mig_layout": "all-1g.10gb"})
    assert r.status_code == 422 and "needs sharing mig" in r.text
    r = world.patch("admin", "/gpus/GPU-n1-2", json={})
    assert r.status_code == 422
    g = _gpu(world, "GPU-n1-2")
    assert g["sharing"] == "exclusive" and g["mig_layout"] is None  # nothing changed


def test_mig_request_runs_on_an_instance_and_the_layout_is_then_locked(world) -> None:
    world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "mig", "mig_layout": "all-3g.40gb"})
    w = world.submit(mig="3g.40gb", cpus=1, memory_mib=1024)
    assert w["request"]["mig"] == "3g.40gb"
    world.scheduler.run_once()
    got = world.get("member", f"/workloads/{w['id']}").json()
    (share,) = got["allocation"]["shares"]
    assert share["gpu_uuid"] == "GPU-n1-2" and share["enforcement"] == "hardware"
    assert (share["mig_profile"], share["mig_start"]) == ("3g.40gb", 0)
    held = {i["start"]: i["workload_id"] for i in _gpu(world, "GPU-n1-2")["mig_instances"]}
    assert held == {0: w["id"], 4: None}
    r = world.patch("admin", "/gpus/GPU-n1-2", json={"mig_layout": "all-1g.10gb"})
    assert r.status_code == 409 and w["id"] in r.text and "no work holds it" in r.text
    assert _gpu(world, "GPU-n1-2")["mig_layout"] == "all-3g.40gb"


def test_mig_request_no_gpu_could_hold_is_refused_at_submit(world) -> None:
    r = world.post("member", "/workloads", json={"mig": "1g.10gb", "command": ["x"]})
    assert r.status_code == 422 and "mig mode" in r.text
    assert r.json().get("field") in (None, "mig") or "mig" in r.text
    world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "mig", "mig_layout": "all-1g.10gb"})
    r = world.post("member", "/workloads", json={"mig": "1g.5gb", "command": ["x"]})
    assert r.status_code == 422 and "no GPU in mig mode has that profile" in r.text
    r = world.post("member", "/workloads", json={"mig": "1g.10gb", "gpus": 1, "command": ["x"]})
    assert r.status_code == 422 and "not both" in r.text


def _sampled_node(world, spec: str) -> SimulatedSource:
    """A node `sim` whose GPUs this process samples (as the local engine does)."""
    src = SimulatedSource(spec, clock=world.clock, hostname="sim")
    sampler = Sampler(src, clock=world.clock)
    sampler.sample_once()
    world.ctx.samplers.append(sampler)
    from gpupool.domain import Node

    gpus = tuple(g.to_domain() for g in src.snapshot().gpus)
    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(Node("sim", gpus, cpu_milli=8000, memory_mib=64000))
    return src


def test_mig_sharing_is_refused_on_a_gpu_whose_mig_mode_is_off(world) -> None:
    src = _sampled_node(world, "2xH100-80GB")
    r = world.patch("admin", f"/gpus/{src.uuid(1)}", json={"sharing": "mig"})
    assert r.status_code == 409 and r.headers["content-type"].startswith(PROBLEM)
    assert "MIG mode off" in r.text and "nvidia-smi -i 1 -mig 1" in r.text
    assert _gpu(world, src.uuid(1))["sharing"] == "exclusive"


def test_a_gpu_found_in_mig_mode_offers_its_instances(world) -> None:
    src = _sampled_node(world, "1xH100-80GB:mig=all-1g.10gb,1xH100-80GB")
    g = _gpu(world, src.uuid(0))
    assert g["sharing"] == "mig" and len(g["mig_instances"]) == 7
    # a layout other than the devices NVML lists cannot be bound: refused
    r = world.patch("admin", f"/gpus/{src.uuid(0)}", json={"mig_layout": "all-3g.40gb"})
    assert r.status_code == 409 and "never creates them" in r.text
    r = world.patch("admin", f"/gpus/{src.uuid(0)}", json={"mig_layout": "all-1g.10gb"})
    assert r.status_code == 200 and r.json()["mig_layout"] == "all-1g.10gb"
    assert g["mig_layout"] == "all-1g.10gb"  # found in NVML, named


def test_relayout_an_engine_cannot_apply_is_undone_and_said(world) -> None:
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.server.loops.mig_relayout import MigRelayoutLoop

    world.patch("admin", "/gpus/GPU-n1-2", json={"sharing": "mig", "mig_layout": "all-1g.10gb"})
    world.submit(mig="3g.40gb")
    engine = FakeEngine(world.executor)
    loop = MigRelayoutLoop(world.ctx, engine.apply_mig_layout)
    assert loop.run_once() == []
    assert _gpu(world, "GPU-n1-2")["mig_layout"] == "all-1g.10gb"  # put back
    events = world.get("admin", "/events", params={"kind": "gpu.mig_relayout_refused"}).json()
    items = events["items"] if isinstance(events, dict) else events
    (e,) = [e for e in items if e["kind"] == "gpu.mig_relayout_refused"]
    assert "does not change MIG layouts" in e["message"]


def test_a_cluster_nodes_gpu_reported_with_mig_off_may_still_be_set_to_mig(world) -> None:
    """On a cluster the GPU Operator's MIG manager turns MIG on after gpupool is told, so an
    agent's reading of MIG off does not refuse it (the local engine's own reading does)."""
    from tests.server.test_agents import report_of, send, token_for

    sim = SimulatedSource("1xH100-80GB", clock=world.clock, hostname="gpu-a")
    token = token_for(world)
    assert send(world, token, report_of(sim)).status_code in (200, 202, 204)
    assert sim.snapshot().gpus[0].mig_enabled is False
    r = world.patch("admin", f"/gpus/{sim.uuid(0)}", json={"sharing": "mig"})
    assert r.status_code == 200, r.text
    r = world.patch("admin", f"/gpus/{sim.uuid(0)}", json={"mig_layout": "all-3g.40gb"})
    assert r.status_code == 200 and len(r.json()["mig_instances"]) == 2
