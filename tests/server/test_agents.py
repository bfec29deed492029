"""Node agents against a real app (SQLite and PostgreSQL) on a ManualClock: credentials that
can only report for their node, reports seen in /nodes, /metrics and the dashboard's data,
lost agents turning their node `unknown` and back."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.agent.attribute import ProcessTags
from gpupool.agent.report import build_report
from gpupool.domain import Node, NodeState
from gpupool.server.loops.nodewatch import NodeWatchLoop
from gpupool.server.routes import iter_routes
from gpupool.server.services.agents import LOST_AFTER_REPORTS
from gpupool.store import EventRepo, NodeRepo
from gpupool.telemetry.simulated import SimulatedSource
from tests.server.conftest import API

INTERVAL = 5.0


@pytest.fixture
def sim(world):
    """Two simulated GPUs of node gpu-a, on the world's clock."""
    return SimulatedSource("2xH100-80GB", clock=world.clock, hostname="gpu-a")


def token_for(world, node: str = "gpu-a") -> str:
    r = world.post("admin", f"/nodes/{node}/tokens")
    assert r.status_code == 201, r.text
    assert r.json()["token"].startswith("gpn_")
    return r.json()["token"]


def report_of(sim, tags=None, interval=INTERVAL) -> dict:
    return build_report(sim.snapshot(), tags or {}, interval_s=interval, cpu_milli=8000)


def send(world, token: str, body: dict, node: str = "gpu-a"):
    return world.client.post(
        f"{API}/nodes/{node}/report", json=body, headers={"Authorization": f"Bearer {token}"}
    )


def node_of(world, name: str = "gpu-a") -> dict:
    r = world.get("viewer", f"/nodes/{name}")
    assert r.status_code == 200, r.text
    return r.json()


def metrics(world) -> dict[str, list]:
    text = world.scrape()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


POD_UID = "6b1f0a2e-1111-4222-8333-944455550001"


def own_pod(world, monkeypatch, workload_id: str) -> None:
    """The executor runs `workload_id` in pod POD_UID (as the kubernetes engine tells)."""
    world.executor.containers["pod"] = {POD_UID: workload_id}


def test_report_registers_the_node_with_its_gpus_and_attributed_processes(world, sim, monkeypatch):
    token = token_for(world)
    w = world.submit(gpus=1, tenant="lab")
    own_pod(world, monkeypatch, w["id"])
    sim.set_utilization(0, 87.0)
    pid, stray = 4100, 4200
    sim.add_process(0, pid, memory_mib=2048, sm_util=40.0)
    sim.add_process(1, stray, memory_mib=100)
    tags = {
        pid: ProcessTags(pid, containers={"pod": POD_UID}, unix_user="ann", command="python"),
        stray: ProcessTags(stray, containers={"slurm-job": "4242"}, unix_user="bob"),
    }
    r = send(world, token, report_of(sim, tags))
    assert r.status_code == 200, r.text
    ack = r.json()
    assert ack["state"] == "ready" and ack["gpus"] == 2
    assert ack["lost_after_s"] == LOST_AFTER_REPORTS * INTERVAL

    n = node_of(world)
    assert n["state"] == "ready" and n["cpu_milli"] == 8000
    assert [g["uuid"] for g in n["gpus"]] == [sim.uuid(0), sim.uuid(1)]
    assert n["gpus"][0]["model"] == "NVIDIA H100 80GB HBM3"
    t = n["telemetry"]
    assert t["lost"] is False and t["simulated"] is True and t["interval_s"] == INTERVAL
    assert t["gpus"][0]["util_gpu"] == 87.0
    procs = {p["pid"]: p for p in t["processes"]}
    assert procs[pid]["workload_id"] == w["id"]
    assert (procs[pid]["user"], procs[pid]["tenant"], procs[pid]["via"]) == ("ann", "lab", "pod")
    assert procs[pid]["memory_mib"] == 2048.0
    # a job id the executor does not know: no workload's
    assert procs[stray]["slurm_job_id"] == "4242" and procs[stray]["via"] == "unix-user"
    assert procs[stray]["workload_id"] is None
    # the local engine's node has no agent
    assert node_of(world, "n1")["telemetry"] is None


def test_agent_gpus_are_in_metrics_with_their_owners(world, sim, monkeypatch):
    token = token_for(world)
    w = world.submit(gpus=1, tenant="lab")
    own_pod(world, monkeypatch, w["id"])
    sim.set_utilization(1, 55.0)
    pid = 4300
    sim.add_process(1, pid, memory_mib=512)
    tags = {pid: ProcessTags(pid, containers={"pod": POD_UID})}
    assert send(world, token, report_of(sim, tags)).status_code == 200
    m = metrics(world)
    util = {s.labels["UUID"]: s for s in m["DCGM_FI_DEV_GPU_UTIL"]}
    assert util[sim.uuid(1)].value == 55.0
    assert util[sim.uuid(1)].labels["Hostname"] == "gpu-a"
    (proc,) = [s for s in m["gpupool_gpu_process_memory_bytes"] if s.labels["pid"] == str(pid)]
    assert (proc.labels["user"], proc.labels["tenant"], proc.labels["workload"]) == (
        "ann",
        "lab",
        w["id"],
    )
    assert proc.value == 512 * 1024 * 1024
    (lost,) = m["gpupool_node_agent_lost"]
    assert lost.labels == {"node": "gpu-a"} and lost.value == 0


def test_dashboard_cluster_shows_agent_readings(world, sim):
    token = token_for(world)
    sim.set_utilization(0, 33.0)
    assert send(world, token, report_of(sim)).status_code == 200
    r = world.get("viewer", "/dashboard/cluster")
    assert r.status_code == 200, r.text
    (node,) = [n for n in r.json()["nodes"] if n["name"] == "gpu-a"]
    assert node["gpus"][0]["util"] == 33.0 and node["gpus"][0]["simulated"] is True


def test_lost_agent_makes_the_node_unknown_and_a_report_brings_it_back(world, sim):
    token = token_for(world)
    watch = NodeWatchLoop(world.ctx)
    assert send(world, token, report_of(sim)).status_code == 200
    world.patch("admin", "/nodes/gpu-a", json={"state": "draining"})
    world.clock.advance(LOST_AFTER_REPORTS * INTERVAL)  # exactly at the limit: not yet
    assert watch.run_once() == []
    assert node_of(world)["state"] == "draining"

    world.clock.advance(0.5)
    assert watch.run_once() == ["gpu-a"]
    n = node_of(world)
    assert n["state"] == "unknown"
    assert n["telemetry"]["lost"] is True and n["telemetry"]["age_s"] == 15.5
    assert watch.run_once() == []  # once
    m = metrics(world)
    assert [s.value for s in m["gpupool_node_agent_lost"]] == [1.0]
    assert not [s for s in m.get("DCGM_FI_DEV_GPU_UTIL", []) if s.labels["Hostname"] == "gpu-a"]
    with world.ctx.store.read() as s:
        ((_, ev),) = EventRepo(s).list(kind="node.lost")
    assert "no report from its agent for 16 s" in ev.message
    with world.ctx.store.read() as s:
        assert NodeRepo(s).get("gpu-a").schedulable is False

    ack = send(world, token, report_of(sim)).json()
    assert ack["state"] == "draining"  # the admin's state, not `ready`
    assert node_of(world)["state"] == "draining"
    with world.ctx.store.read() as s:
        assert [e.kind for _, e in EventRepo(s).list(kind="node.found")] == ["node.found"]


def test_a_down_node_stays_down_and_nodes_without_agents_are_never_lost(world, sim):
    token = token_for(world)
    watch = NodeWatchLoop(world.ctx)
    assert send(world, token, report_of(sim)).status_code == 200
    world.patch("admin", "/nodes/gpu-a", json={"state": "down"})
    world.clock.advance(3600)
    assert watch.run_once() == []
    assert node_of(world)["state"] == "down"
    assert node_of(world, "n1")["state"] == "ready"  # no agent: the local engine's node


def test_node_credential_reports_only_for_its_node(world, sim):
    token = token_for(world, "gpu-a")
    r = send(world, token, report_of(sim), node="gpu-b")
    assert r.status_code == 403
    assert "reports for node 'gpu-a', not 'gpu-b'" in r.json()["detail"]
    assert world.get("admin", "/nodes/gpu-b").status_code == 404  # nothing registered


def test_user_tokens_cannot_report(world, sim):
    r = send(world, world.tokens["admin"], report_of(sim))
    assert r.status_code == 403
    assert "node credential" in r.json()["detail"]
    assert world.client.post(f"{API}/nodes/gpu-a/report", json=report_of(sim)).status_code == 401
    r = send(world, "gpn_forged", report_of(sim))
    assert r.status_code == 401 and "gpupool node token create gpu-a" in r.json()["detail"]


def test_revoked_credential_is_refused(world, sim):
    token = token_for(world)
    (row,) = world.get("admin", "/nodes/gpu-a/tokens").json()
    assert world.delete("admin", f"/nodes/gpu-a/tokens/{row['id']}").status_code == 200
    assert send(world, token, report_of(sim)).status_code == 401
    assert world.delete("admin", f"/nodes/gpu-b/tokens/{row['id']}").status_code == 404


@pytest.mark.parametrize("role", ["tenant-admin", "member", "viewer"])
def test_only_admins_manage_node_credentials(world, role):
    assert world.post(role, "/nodes/gpu-a/tokens").status_code == 403
    assert world.get(role, "/nodes/gpu-a/tokens").status_code == 403


def test_node_credential_is_refused_on_every_other_route(world, sim):
    """The node credential grants nothing an anonymous caller does not have, anywhere but
    its own report route."""
    token = token_for(world)
    checked = 0
    for method, path in sorted(set(iter_routes(world.app.routes))):
        if path == f"{API}/nodes/{{name}}/report":
            continue
        url = re.sub(r"\{[^}]+\}", "gpu-a", path)
        anonymous = world.client.request(method, url, json={})
        as_node = world.client.request(
            method, url, json={}, headers={"Authorization": f"Bearer {token}"}
        )
        assert as_node.status_code == anonymous.status_code, (method, path, as_node.text)
        checked += 1
    assert checked > 30


@pytest.mark.parametrize(
    ("mutate", "status", "says"),
    [
        (lambda b: b["processes"].append({"pid": 9, "gpu_uuid": "GPU-nope"}), 422, "GPU-nope"),
        (lambda b: b["gpus"].append(dict(b["gpus"][0])), 422, "listed twice"),
        (lambda b: b.update(interval_s=0), 422, "interval_s"),
        (lambda b: b.update(surprise=1), 422, "surprise"),
    ],
)
def test_bad_reports_are_refused_and_change_nothing(world, sim, mutate, status, says):
    token = token_for(world)
    body = report_of(sim)
    mutate(body)
    r = send(world, token, body)
    assert r.status_code == status and says in r.text
    assert world.get("admin", "/nodes/gpu-a").status_code == 404


def test_a_gpu_registered_on_another_node_is_a_conflict(world):
    token = token_for(world, "gpu-b")
    with world.ctx.store.read() as s:
        n1 = NodeRepo(s).get("n1")
    body = build_report(
        SimulatedSource("1xH100-80GB", clock=world.clock, hostname="gpu-b").snapshot(),
        {},
        interval_s=INTERVAL,
    )
    body["gpus"][0]["uuid"] = n1.gpus[0].uuid
    r = send(world, token, body, node="gpu-b")
    assert r.status_code == 409 and "already registered on node 'n1'" in r.json()["detail"]


def test_bad_node_names_for_credentials_are_refused(world):
    r = world.post("admin", "/nodes/-bad-/tokens")
    assert r.status_code == 422 and "bad node name" in r.json()["detail"]


def test_unknown_nodes_are_not_schedulable():
    assert Node("x", state=NodeState.UNKNOWN).schedulable is False


def test_credentials_are_checked_before_the_body(world):
    """A caller without the node's credential learns nothing about what a report holds."""
    r = world.client.post(f"{API}/nodes/gpu-a/report", json={"nonsense": 1})
    assert r.status_code == 401
    r = world.post("member", "/nodes/gpu-a/report", json={"nonsense": 1})
    assert r.status_code == 403


def test_work_goes_only_to_nodes_the_executor_runs(world, sim):
    """An agent's node is watched; the local engine's executor cannot run work there, so the
    scheduler places nothing on it."""
    token = token_for(world)
    assert send(world, token, report_of(sim)).status_code == 200
    world.patch("admin", "/nodes/n1", json={"state": "draining"})  # only gpu-a has room
    world.ctx.work_nodes = frozenset({"n1"})
    w = world.submit(gpus=1, tenant="lab")
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{w['id']}").json()["state"] == "pending"
    world.ctx.work_nodes = None  # an engine that runs work on every registered node
    world.scheduler.run_once()
    got = world.get("member", f"/workloads/{w['id']}").json()
    assert got["state"] != "pending" and got["allocation"]["node"] == "gpu-a"


def test_a_request_only_an_agents_node_could_hold_is_refused_at_submit(world, sim):
    token = token_for(world)
    assert send(world, token, report_of(sim)).status_code == 200
    world.ctx.work_nodes = frozenset({"n1"})
    body = {"gpus": 1, "gpu_model": "NVIDIA H100 80GB HBM3", "tenant": "lab", "command": ["x"]}
    r = world.post("admin", "/workloads", json=body)  # only gpu-a has that model
    assert r.status_code == 422, r.text
    world.ctx.work_nodes = None
    r = world.post("admin", "/workloads", json=body)
    assert r.status_code == 201, r.text


def test_a_process_claiming_another_tenants_workload_is_not_attributed_to_it(
    world, sim, monkeypatch
):
    """Review F13: a process that sets GPUPOOL_WORKLOAD_ID to another tenant's workload (the
    agent reports the claim) is not shown as that workload's; its own pod decides."""
    token = token_for(world)
    theirs = world.submit(gpus=1, tenant="lab")  # ann's, in lab
    own_pod(world, monkeypatch, None)  # POD_UID: a pod gpupool did not create
    sim.add_process(0, 5100, memory_mib=100)  # no pod: a bare process on the node
    sim.add_process(0, 5200, memory_mib=100)  # in a foreign pod
    tags = {
        5100: ProcessTags(5100, workload_id=theirs["id"], unix_user="mallory"),
        5200: ProcessTags(5200, workload_id=theirs["id"], containers={"pod": POD_UID}),
    }
    assert send(world, token, report_of(sim, tags)).status_code == 200
    procs = {p["pid"]: p for p in node_of(world)["telemetry"]["processes"]}
    for pid in (5100, 5200):
        assert procs[pid]["workload_id"] is None, procs[pid]
        assert procs[pid]["user"] is None and procs[pid]["tenant"] is None
    assert procs[5100]["via"] == "unix-user" and procs[5200]["via"] == "none"
    samples = metrics(world)["gpupool_gpu_process_memory_bytes"]
    assert not [s for s in samples if s.labels.get("workload") == theirs["id"]]


@pytest.mark.parametrize("off_s", [-86400.0, -31.0, 31.0, 3600.0])
def test_a_stale_or_future_report_is_refused_and_changes_nothing(world, sim, off_s):
    """Review F13: a day-old report (a replay) is refused with a 422 that says why; so is
    one further off the server's clock than 3 intervals (at least 30 s)."""
    token = token_for(world)
    body = report_of(sim)
    body["timestamp"] = world.clock.now() + off_s
    r = send(world, token, body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert "server's clock" in r.json()["detail"] and "NTP" in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "timestamp"
    assert world.get("admin", "/nodes/gpu-a").status_code == 404  # nothing registered


def test_reports_within_the_allowed_skew_are_accepted(world, sim):
    token = token_for(world)
    for off_s in (-30.0, 0.0, 29.0):
        body = report_of(sim)
        body["timestamp"] = world.clock.now() + off_s
        assert send(world, token, body).status_code == 200
    body = report_of(sim, interval=60.0)  # 3 intervals of 60 s: 180 s
    body["timestamp"] = world.clock.now() - 170.0
    assert send(world, token, body).status_code == 200
