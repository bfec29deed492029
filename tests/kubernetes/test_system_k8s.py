"""End to end: gpupool's API and loops (`build_system`) with the kubernetes engine pointed at
the fake API server: submit a job, see its pod, drive it, see the workload follow."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import EventRepo, NodeRepo
from gpupool.system import SystemSettings, build_system

GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
NS = "gpupool-default"


@pytest.fixture
def system(kube, clock, tmp_path):
    kube.add_node("gpu-1", 2, labels=GFD)
    engine = KubernetesEngine(KubeOptions(), api_client=kube.client())
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    s = SystemSettings(server=Settings(database_url=db, start_loops=False), admin="admin")
    system = build_system(s, engine, clock=clock)
    try:
        yield system
    finally:
        system.stop()


def _client(system):
    token = issue_token(system.ctx, "admin", "test", None).token
    return TestClient(system.app, headers={"Authorization": f"Bearer {token}"})


def _submit(client, gpus: int = 1) -> str:
    r = client.post(
        "/api/v1/workloads",
        json={"gpus": gpus, "command": ["python", "train.py"], "tenant": "default"},
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _state(client, wid: str) -> dict:
    return client.get(f"/api/v1/workloads/{wid}").json()


def test_a_job_runs_as_a_pod_and_succeeds(system, kube, clock):
    ctx = system.ctx
    assert [n for n in ctx.loops if n.name == "inventory"]
    with ctx.store.read() as s:
        (node,) = NodeRepo(s).list()
    assert node.name == "gpu-1" and len(node.gpus) == 2
    client = _client(system)
    wid = _submit(client)
    ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    assert pod["metadata"]["namespace"] == NS
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert _state(client, wid)["state"] == "starting"
    kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1")
    ctx.loops.get("reconciler").run_once()
    assert _state(client, wid)["state"] == "running"
    kube.write_log(NS, pod["metadata"]["name"], "epoch 1\n")
    kube.set_phase(NS, pod["metadata"]["name"], "Succeeded", exit_code=0)
    ctx.loops.get("reconciler").run_once()
    w = _state(client, wid)
    assert (w["state"], w["exit_code"]) == ("succeeded", 0)


def test_a_failed_pod_fails_the_workload_with_its_exit_code(system, kube, clock):
    client = _client(system)
    wid = _submit(client)
    system.ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    kube.set_phase(NS, pod["metadata"]["name"], "Failed", node="gpu-1", exit_code=2)
    system.ctx.loops.get("reconciler").run_once()
    w = _state(client, wid)
    assert (w["state"], w["exit_code"]) == ("failed", 2)


def test_a_pod_stuck_pending_is_requeued_with_the_reason_and_the_node_reread(system, kube, clock):
    ctx = system.ctx
    client = _client(system)
    wid = _submit(client)
    ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    name = pod["metadata"]["name"]
    kube.set_unschedulable(NS, name, "0/1 nodes are available: 1 node(s) had untolerated taint")
    # meanwhile someone else's pod took both GPUs of the node
    kube.add_pod(
        {
            "metadata": {"name": "other", "namespace": "default", "labels": {}},
            "spec": {
                "nodeName": "gpu-1",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ],
            },
            "status": {"phase": "Running"},
        }
    )
    clock.advance(31)
    ctx.loops.get("reconciler").run_once()
    w = _state(client, wid)
    assert w["state"] == "pending", w
    assert "untolerated taint" in w["reason"] and "Pending for 31 s" in w["reason"]
    assert kube.pods_of(f"gpupool.dev/workload={wid}") == []
    assert ctx.loops.get("inventory").run_once() == ["gpu-1"]  # due at once, not in 10 s
    with ctx.store.read() as s:
        (node,) = NodeRepo(s).list()
        pending_events = EventRepo(s).list(kind="kubernetes.pod_pending")
    assert [g.health.value for g in node.gpus] == ["healthy", "healthy"]
    assert [g.outside and g.outside.ref for g in node.gpus] == ["pod default/other"] * 2
    assert dict(node.labels)["gpupool.dev/outside-gpus"] == "2"
    assert [e.data["node"] for _, e in pending_events] == ["gpu-1"]
    ctx.loops.get("scheduler").run_once()  # nothing free: it waits, no new pod
    assert kube.pods_of(f"gpupool.dev/workload={wid}") == []
    assert _state(client, wid)["state"] == "pending"


def test_cancel_deletes_the_pod(system, kube, clock):
    client = _client(system)
    wid = _submit(client)
    system.ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1")
    system.ctx.loops.get("reconciler").run_once()
    r = client.delete(f"/api/v1/workloads/{wid}")
    assert r.status_code in (200, 202), r.text
    assert kube.deletes and kube.deletes[0][:2] == (NS, pod["metadata"]["name"])
    kube.vanish(NS, pod["metadata"]["name"])  # the kubelet ended it within the grace
    system.ctx.loops.get("reconciler").run_once()
    assert _state(client, wid)["state"] == "cancelled"


def test_the_inventory_loop_rereads_nodes_on_its_interval(system, kube, clock):
    loop = system.ctx.loops.get("inventory")
    assert loop.run_once() == ["gpu-1"]
    kube.cordon("gpu-1")
    kube.add_node("gpu-2", 4, labels=GFD)
    clock.advance(5)
    assert loop.run_once() == []  # not due yet: every 10 s
    clock.advance(5)
    assert loop.run_once() == ["gpu-1", "gpu-2"]
    with system.ctx.store.read() as s:
        states = {n.name: n.state.value for n in NodeRepo(s).list()}
    assert states == {"gpu-1": "draining", "gpu-2": "ready"}
    assert system.ctx.runs_work_on("gpu-2")


def test_tenancy_objects_follow_the_store(system, kube, clock):
    """At start the default tenant's objects exist; a new member reaches its RoleBinding on
    the inventory loop's next pass."""
    from gpupool.domain import Membership, Role, User
    from gpupool.store import UserRepo

    member = kube.objects["rolebindings"][(NS, "gpupool-member")]
    assert [s["name"] for s in member["subjects"]] == ["admin"]
    assert member["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gpupool-member",
    }
    assert (NS, "home-admin") in kube.objects["persistentvolumeclaims"]
    with system.ctx.store.write() as s:
        users = UserRepo(s)
        users.create(User("eve"), None, clock.now())
        users.set_membership(Membership("eve", "default", Role.TENANT_ADMIN))
    system.ctx.loops.get("inventory").run_once()
    ta = kube.objects["rolebindings"][(NS, "gpupool-tenant-admin")]
    assert [s["name"] for s in ta["subjects"]] == ["eve"]


def test_a_reconcile_pass_between_start_and_its_record_keeps_the_pod(system, kube):
    """A watch wakes the reconciler as soon as the pod exists, before the scheduler records
    the start: the reconciler moves it to starting first, and the scheduler must not take
    that for a cancel (it deleted the pod: 'the work failed: the pod was deleted')."""
    ctx = system.ctx
    ex = system.engine.executor
    start = ex.start

    def start_then_reconcile(*a, **kw):
        handle = start(*a, **kw)
        ctx.loops.get("reconciler").run_once()
        return handle

    ex.start = start_then_reconcile
    client = _client(system)
    wid = _submit(client)
    ctx.loops.get("scheduler").run_once()
    assert kube.deletes == []
    assert _state(client, wid)["state"] == "starting"
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1")
    ctx.loops.get("reconciler").run_once()
    assert _state(client, wid)["state"] == "running"
