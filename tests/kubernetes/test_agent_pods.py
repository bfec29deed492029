"""The agent DaemonSet on Kubernetes: processes reported with a pod UID are attributed, by the
kubernetes executor's `owners("pod", ...)`, to the workload whose pod has that UID; processes in
pods gpupool did not create show as outside gpupool (with the pod's name when the inventory
listed it). gpupool's API and loops run with the kubernetes engine against the fake API
server; the report is built by the agent's own code from a simulated GPU source."""

from __future__ import annotations

import io

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from gpupool.agent.attribute import ProcessTags
from gpupool.agent.report import build_report
from gpupool.cli import cluster_view
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.engines.kubernetes.attribution import PodRef
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo
from gpupool.system import SystemSettings, build_system
from gpupool.telemetry import SimulatedSource
from tests.store.databases import DB_PARAMS, store_url

GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
NS = "gpupool-default"
STRANGER_UID = "0d5f3c2e-1111-4222-8333-944455556666"


@pytest.fixture(params=DB_PARAMS)
def system(request, kube, clock, tmp_path):
    kube.add_node("gpu-1", 2, labels=GFD)
    engine = KubernetesEngine(KubeOptions(), api_client=kube.client())
    db = store_url(request.param, tmp_path)
    s = SystemSettings(
        server=Settings(database_url=db, start_loops=False, metrics_token=SCRAPE), admin="admin"
    )
    system = build_system(s, engine, clock=clock)
    try:
        yield system
    finally:
        system.stop()


#: the /metrics scrape token (the test client is not on the server's host)
SCRAPE = "scrape-token"


def _client(system, token: str | None = None) -> TestClient:
    token = token or issue_token(system.ctx, "admin", "test", None).token
    return TestClient(system.app, headers={"Authorization": f"Bearer {token}"})


def _foreign_pod(kube) -> str:
    """A pod someone else made (kubectl) on gpu-1; returns its UID."""
    kube.add_pod(
        {
            "metadata": {"name": "notebook-x", "namespace": "ml", "labels": {}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"},
        }
    )
    return kube.pod("ml", "notebook-x")["metadata"]["uid"]


def _report(own_uid: str, foreign_uid: str, spoofed_wid: str, clock) -> dict:
    """What the agent on gpu-1 sends: its simulated GPUs (the agent's `--simulate` source)
    with four processes tagged as `HostAttributor` would tag them."""
    sim = SimulatedSource("2xH100-80GB", clock=clock, hostname="gpu-1")
    sim.add_process(0, 101, memory_mib=4000, sm_util=60.0)  # in gpupool's pod
    sim.add_process(0, 202, memory_mib=3000, sm_util=20.0)  # in a foreign pod, env spoofed
    sim.add_process(1, 303, memory_mib=2000, sm_util=10.0)  # in a pod nobody listed
    sim.add_process(1, 404, memory_mib=1000, sm_util=5.0)  # no pod at all
    sim.add_process(1, 505, memory_mib=1000, sm_util=5.0)  # no pod, env spoofed
    tags = {
        101: ProcessTags(101, containers={"pod": own_uid}, unix_user="root", command="python"),
        202: ProcessTags(
            202, workload_id=spoofed_wid, containers={"pod": foreign_uid}, unix_user="1000"
        ),
        303: ProcessTags(303, containers={"pod": STRANGER_UID}),
        404: ProcessTags(404, unix_user="bob"),
        505: ProcessTags(505, workload_id=spoofed_wid, unix_user="mallory"),
    }
    return build_report(sim.snapshot(), tags, interval_s=5.0, cpu_milli=8000, memory_mib=1024)


def test_agent_processes_are_attributed_by_pod_uid(system, kube, clock):
    ctx = system.ctx
    admin = _client(system)
    r = admin.post("/api/v1/workloads", json={"gpus": 1, "command": ["train"], "tenant": "default"})
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    own_uid, pod_name = pod["metadata"]["uid"], pod["metadata"]["name"]
    kube.set_phase(NS, pod_name, "Running", node="gpu-1")
    ctx.loops.get("reconciler").run_once()
    foreign_uid = _foreign_pod(kube)
    clock.advance(11)
    assert ctx.loops.get("inventory").run_once() == ["gpu-1"]  # lists every namespace's pods

    token = admin.post("/api/v1/nodes/gpu-1/tokens", json={}).json()["token"]
    agent = TestClient(system.app, headers={"Authorization": f"Bearer {token}"})
    r = agent.post("/api/v1/nodes/gpu-1/report", json=_report(own_uid, foreign_uid, wid, clock))
    assert r.status_code == 200, r.text

    # GET /api/v1/nodes: the node keeps the engine's GPUs; processes carry their owners
    (node,) = admin.get("/api/v1/nodes").json()
    assert [g["uuid"] for g in node["gpus"]] == ["k8s:gpu-1:0", "k8s:gpu-1:1"]
    procs = {p["pid"]: p for p in node["telemetry"]["processes"]}
    own = procs[101]
    assert (own["workload_id"], own["user"], own["tenant"], own["via"], own["pod"]) == (
        wid,
        "admin",
        "default",
        "pod",
        f"{NS}/{pod_name}",
    )
    assert own["gpu_uuid"] == "k8s:gpu-1:0"
    # a foreign pod's process is outside gpupool, whatever its environment claims
    assert (procs[202]["workload_id"], procs[202]["user"], procs[202]["pod"]) == (
        None,
        None,
        "ml/notebook-x",
    )
    assert (procs[303]["workload_id"], procs[303]["pod"], procs[303]["pod_uid"]) == (
        None,
        None,
        STRANGER_UID,
    )
    assert procs[404]["via"] == "unix-user" and procs[404]["workload_id"] is None
    # a process outside any pod that claims gpupool's workload in its environment: no owner
    assert (procs[505]["workload_id"], procs[505]["user"], procs[505]["via"]) == (
        None,
        None,
        "unix-user",
    )
    with ctx.store.read() as s:
        (stored,) = NodeRepo(s).list()
    assert [g.uuid for g in stored.gpus] == ["k8s:gpu-1:0", "k8s:gpu-1:1"]

    # the dashboard's cluster data: readings and processes on the engine's GPUs
    data = admin.get("/api/v1/dashboard/cluster").json()
    (dnode,) = data["nodes"]
    g0, g1 = dnode["gpus"]
    assert g0["memory_used_mib"] is not None and [h["workload"] for h in g0["holders"]] == [wid]
    shown = {p["pid"]: p for p in g0["processes"] + g1["processes"]}
    assert (shown[101]["workload"], shown[101]["user"], shown[101]["tenant"]) == (
        wid,
        "admin",
        "default",
    )
    assert shown[101]["outside"] is False and shown[101]["via"] == "pod"
    assert (shown[202]["outside"], shown[202]["pod"], shown[202]["workload"]) == (
        True,
        "ml/notebook-x",
        None,
    )
    assert (shown[303]["outside"], shown[303]["pod"]) == (True, STRANGER_UID)
    assert procs[303]["via"] == "none"  # a pod UID alone finds no owner

    # `gpupool top` (logged in) renders that data: processes with owners, in 80 columns
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(cluster_view.render_top(data, "http://gpupool"))
    screen = console.export_text()
    assert max(len(line.rstrip()) for line in screen.splitlines()) <= 80, screen
    rows = {line.split()[1]: line for line in screen.splitlines() if line.startswith("gpu-1:")}
    assert wid in rows["101"] and "admin" in rows["101"]
    assert "outside: ml/notebook-x" in rows["202"] and "20%" in rows["202"]
    assert "outside: pod 0d5f3c2e" in rows["303"] and "outside gpupool" in rows["404"]
    header = next(
        line for line in screen.splitlines() if line.startswith("GPU  ") and "PID" in line
    )
    assert header.split()[-2:] == ["MEM", "SM"]

    # /metrics: the per-process series carry workload, user and tenant
    text = admin.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE}"}).text
    mem = {
        s.labels["pid"]: s
        for f in text_string_to_metric_families(text)
        if f.name == "gpupool_gpu_process_memory_bytes"
        for s in f.samples
    }
    assert (mem["101"].labels["workload"], mem["101"].labels["user"]) == (wid, "admin")
    assert mem["101"].labels["tenant"] == "default" and mem["101"].labels["UUID"] == "k8s:gpu-1:0"
    assert mem["101"].value == 4000 * 1024 * 1024
    assert mem["202"].labels["workload"] == "" and mem["202"].labels["tenant"] == ""


def test_the_executor_maps_pod_uids_from_start_list_and_inventory(api, kube, clock):
    from gpupool.domain import Request, Workload

    ex = KubernetesExecutor(api, clock)
    w = Workload("w-1", "physics", "alice", Request(), command=("sleep", "1"))
    ex.start(w, None)
    (pod,) = kube.pods_of("gpupool.dev/workload=w-1")
    uid = pod["metadata"]["uid"]
    # known from the create answer, before any list
    assert ex.owners("pod", [uid, STRANGER_UID]) == {uid: "w-1"}  # a stranger: left out
    name = pod["metadata"]["name"]
    assert ex.container_names("pod", [uid]) == {uid: PodRef("gpupool-physics", name).ref}
    foreign = _foreign_pod(kube)
    ex.note_cluster_pods(api.list_pods())  # the inventory's list of every namespace
    assert ex.owners("pod", [uid, foreign]) == {uid: "w-1", foreign: None}
    assert ex.container_names("pod", [foreign]) == {foreign: "ml/notebook-x"}
    assert ex.owners("slurm-job", [uid]) == {}  # a kind it runs none of
    kube.vanish("gpupool-physics", pod["metadata"]["name"])
    ex.tick()
    assert uid not in ex.owners("pod", [uid])


def test_executors_without_pods_map_none_and_reports_are_unchanged(clock):
    from gpupool.server.services.agents import attribute_containers

    assert FakeExecutor(clock).owners("pod", [STRANGER_UID]) == {}
    procs = [{"pid": 1, "pod_uid": STRANGER_UID, "workload_id": "w-9", "unix_user": "bob"}]
    attribute_containers(FakeExecutor(clock), procs)
    assert procs[0]["workload_id"] == "w-9" and "via" not in procs[0]


def test_an_unowned_process_in_a_pod_is_labelled_outside_gpupool():
    from gpupool.telemetry.attribution import Attribution, Via

    assert Attribution(1, Via.NONE, pod_uid=STRANGER_UID, pod="ml/x").label == (
        "outside gpupool (pod ml/x)"
    )
    assert STRANGER_UID in Attribution(1, Via.NONE, pod_uid=STRANGER_UID).label
    assert Attribution(1, Via.UNIX_USER, unix_user="bob").label == "unowned (bob)"
