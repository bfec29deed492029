"""Node pools on Kubernetes (issue 34 part 2), end to end through `build_system` against the
fake API server over HTTP and its fake autoscaler (fakeapi_provisioning.py, on the test's
clock). No real Cluster Autoscaler or Karpenter runs here: the objects are checked against
the ProvisioningRequest CRD's rules (provreq_schema.py) and, for core kinds, the official
schemas (kubernetes-validate), and the autoscaler's answers are the fake's.

Waiting work that fits no node makes a ProvisioningRequest with a PodTemplate of its shape;
once Provisioned, the new node joins the inventory and the work is admitted there, its pod
consuming the request; a gang's request is atomic (all its nodes or none); a request the
autoscaler fails or never fulfils is withdrawn with the reason; where the cluster has no
ProvisioningRequest API, placeholder pods at the lowest priority ask for the node instead."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpupool.domain.nodepools import POOL_LABEL, PoolNodeState, RequestState
from gpupool.engines.kubernetes import provisioning as pr
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodePoolRepo, NodeRepo
from gpupool.system import SystemSettings, build_system
from tests.kubernetes.fakeapi_provisioning import FakeAutoscaler
from tests.kubernetes.provreq_schema import problems
from tests.pools import h100_pool

GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
NS = "gpupool-default"
POOL = h100_pool(
    gpu_model="NVIDIA-H100-80GB-HBM3",
    cpu_milli=16_000,
    memory_mib=65_536,
    max_nodes=2,
    idle_seconds=600,
    request_timeout_seconds=1200,
)


@pytest.fixture
def system(kube, clock, tmp_path):
    kube.add_node("gpu-1", 8, labels=GFD)
    kube.add_node("gpu-2", 8, labels=GFD)
    engine = KubernetesEngine(KubeOptions(watch=False), api_client=kube.client())
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    s = SystemSettings(server=Settings(database_url=db, start_loops=False), admin="admin")
    system = build_system(s, engine, clock=clock)
    with system.ctx.store.write() as tx:
        NodePoolRepo(tx).save(POOL, create=True)
    try:
        yield system
    finally:
        system.stop()


@pytest.fixture
def autoscaler(kube, clock):
    a = FakeAutoscaler(kube, clock, delay_s=60)
    a.add_group("gpu-h100", 8, max_nodes=2, **GFD)
    return a


class World:
    def __init__(self, system, kube, clock):
        self.system, self.kube, self.clock = system, kube, clock
        token = issue_token(system.ctx, "admin", "test", None).token
        self.client = TestClient(system.app, headers={"Authorization": f"Bearer {token}"})

    def loop(self, name):
        return self.system.ctx.loops.get(name)

    def submit(self, **body) -> str:
        body = {"command": ["python", "train.py"], "tenant": "default", **body}
        r = self.client.post("/api/v1/workloads", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def get(self, wid) -> dict:
        return self.client.get(f"/api/v1/workloads/{wid}").json()

    def fill(self) -> None:
        """Six GPUs of each node taken: two free on each."""
        ids = [self.submit(gpus=6), self.submit(gpus=6)]
        self.loop("scheduler").run_once()
        assert all(self.get(i)["state"] != "pending" for i in ids)

    def why(self, wid) -> str:
        w = self.get(wid)
        return (w.get("pending") or {}).get("reason") or w.get("reason") or ""

    def inventory(self):
        self.clock.advance(10)  # the inventory is re-read when due
        return self.loop("inventory").run_once()

    def requests(self):
        with self.system.ctx.store.read() as s:
            return NodePoolRepo(s).requests(open_only=False)

    def pool_nodes(self):
        with self.system.ctx.store.read() as s:
            return {n.name: n.state for n in NodePoolRepo(s).nodes("gpu-h100")}


@pytest.fixture
def world(system, kube, clock):
    return World(system, kube, clock)


def _one_pod_of(kube, wid):
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    return pod


def test_waiting_work_gets_a_provisioning_request_and_runs_on_the_new_node(world, kube, autoscaler):
    world.fill()
    wid = world.submit(gpus=4)  # fits no node now: waits for one of the pool
    world.loop("scheduler").run_once()
    assert world.why(wid).startswith("waiting for a node of pool gpu-h100"), world.why(wid)

    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert req.state is RequestState.OPEN and req.for_workloads == (wid,)
    (sent,) = kube.provisioning.created
    assert problems(sent) == []
    assert sent["metadata"]["namespace"] == NS and sent["metadata"]["name"] == req.id
    assert sent["spec"]["provisioningClassName"] == pr.ATOMIC
    assert sent["spec"]["parameters"] == {"ValidUntilSeconds": "1200"}
    (pod_set,) = sent["spec"]["podSets"]
    assert pod_set["count"] == 1
    template = kube.provisioning.templates[(NS, pod_set["podTemplateRef"]["name"])]
    spec = template["template"]["spec"]
    assert spec["nodeSelector"] == {POOL_LABEL: "gpu-h100"}
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    kv = pytest.importorskip("kubernetes_validate")
    for version in ("1.30.0", "1.34.0"):
        kv.validate(template, version, strict=True)

    autoscaler.step()  # accepted; the node comes after the delay
    world.loop("autoscale").run_once()
    assert world.requests()[0].state is RequestState.OPEN
    assert world.why(wid).startswith("waiting for a node of pool gpu-h100")
    world.clock.advance(60)
    autoscaler.step()
    (added,) = autoscaler.groups["gpu-h100"].added
    assert pr.request_state(kube.provisioning.requests[(NS, req.id)])[0] is RequestState.FULFILLED
    # someone's ProvisioningRequest of the same name and labels in another namespace, never
    # provisioned, neither holds gpupool's request open nor becomes part of it
    decoy = {**sent, "metadata": {**sent["metadata"], "namespace": "team-x"}, "status": {}}
    kube.provisioning.requests[("team-x", req.id)] = decoy

    world.loop("autoscale").run_once()
    assert world.requests()[0].state is RequestState.FULFILLED
    assert ("team-x", req.id) in kube.provisioning.requests
    assert world.pool_nodes() == {added: PoolNodeState.UP}
    assert added in world.inventory()  # the new node joins the inventory
    world.loop("scheduler").run_once()
    w = world.get(wid)
    assert w["allocation"]["nodes"] == [added], w
    pod = _one_pod_of(kube, wid)
    notes = pod["metadata"]["annotations"]
    assert notes[pr.CONSUME] == req.id and notes[pr.CLASS_ANNOTATION] == pr.ATOMIC


def test_a_gang_gets_all_its_nodes_at_once_and_each_pod_consumes_the_request(
    world, kube, autoscaler
):
    world.fill()
    wid = world.submit(nodes=2, gpus_per_node=8)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert req.atomic and req.count == 2
    autoscaler.step()
    world.clock.advance(60)
    autoscaler.step()
    added = autoscaler.groups["gpu-h100"].added
    assert len(added) == 2  # both at once
    world.loop("autoscale").run_once()
    assert world.requests()[0].state is RequestState.FULFILLED
    world.inventory()
    world.loop("scheduler").run_once()
    assert sorted(world.get(wid)["allocation"]["nodes"]) == sorted(added)
    pods = kube.pods_of(f"gpupool.dev/workload={wid}")
    assert len(pods) == 2
    assert {p["metadata"]["annotations"][pr.CONSUME] for p in pods} == {req.id}


def test_a_restarted_server_finds_its_provisioning_requests_again(world, kube, clock, autoscaler):
    from gpupool.engines.kubernetes.client import KubeApi
    from gpupool.engines.kubernetes.executor import KubernetesExecutor

    world.fill()
    wid = world.submit(gpus=4)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    fresh = KubernetesExecutor(KubeApi(kube.client()), clock)  # knows nothing yet
    (seen,) = fresh.pool_states([POOL]).requests
    assert (seen.request, seen.state) == (req.id, RequestState.OPEN)
    assert fresh.consume_annotations(wid) == {
        pr.CONSUME: req.id,
        pr.CLASS_ANNOTATION: pr.ATOMIC,
    }
    autoscaler.step()
    clock.advance(60)
    autoscaler.step()
    (seen,) = fresh.pool_states([POOL]).requests
    assert seen.state is RequestState.FULFILLED
    fresh.withdraw(req.id)  # deletes its objects
    assert not kube.provisioning.requests and not kube.provisioning.templates


def test_a_gangs_request_is_atomic_and_a_failed_one_is_withdrawn_with_the_reason(
    world, kube, autoscaler
):
    autoscaler.groups["gpu-h100"].max_nodes = 1  # the node group cannot hold both nodes
    world.fill()
    wid = world.submit(nodes=2, gpus_per_node=8)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (sent,) = kube.provisioning.created
    assert sent["spec"]["provisioningClassName"] == pr.ATOMIC
    assert [s["count"] for s in sent["spec"]["podSets"]] == [2]  # one set: both nodes at once
    autoscaler.step()  # seen now, acted on after its delay
    world.clock.advance(60)
    autoscaler.step()
    assert autoscaler.groups["gpu-h100"].added == []  # atomic: no node of the two
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert req.state is RequestState.WITHDRAWN
    assert "Failed" in req.reason and "maximum of 1 nodes" in req.reason, req.reason
    assert world.get(wid)["state"] == "pending"


def test_a_request_never_fulfilled_is_withdrawn_after_its_timeout(world, kube, autoscaler):
    autoscaler.groups["gpu-h100"].stuck = True
    world.fill()
    wid = world.submit(gpus=8)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert (NS, req.id) in kube.provisioning.requests and kube.provisioning.templates
    world.clock.advance(POOL.request_timeout_seconds)
    autoscaler.step()
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert req.state is RequestState.WITHDRAWN
    assert "not fulfilled within 20 min" in req.reason, req.reason
    # its objects are gone from the cluster; nothing waits on the node
    assert not kube.provisioning.requests and not kube.provisioning.templates
    world.loop("scheduler").run_once()
    assert "was withdrawn" in world.why(wid), world.why(wid)


def test_without_the_provisioning_request_api_placeholder_pods_ask_for_the_node(
    world, kube, autoscaler
):
    kube.provisioning.crd = False  # the cluster's autoscaler has no ProvisioningRequests
    world.fill()
    wid = world.submit(gpus=4)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    assert kube.provisioning.created == [] and not kube.provisioning.templates
    (holder,) = kube.pods_of(pr.PLACEHOLDER)
    spec = holder["spec"]
    assert spec["priorityClassName"] == pr.PLACEHOLDER_CLASS
    assert spec["nodeSelector"] == {POOL_LABEL: "gpu-h100"}
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    kv = pytest.importorskip("kubernetes_validate")
    kv.validate(holder, "1.34.0", strict=True)
    kv.validate(pr.priority_class(), "1.34.0", strict=True)

    # a pod of someone else's labelled as this request's placeholder, pending for ever:
    # neither holds the request open nor is deleted by gpupool
    decoy = {**holder, "metadata": {**holder["metadata"], "namespace": "team-x", "name": "d"}}
    decoy["spec"] = {**spec, "nodeSelector": {"nowhere": "x"}}
    kube.add_pod(decoy)
    autoscaler.step()
    world.clock.advance(60)
    autoscaler.step()  # the autoscaler adds a node for the pending placeholder
    (added,) = autoscaler.groups["gpu-h100"].added
    assert kube.pod(NS, holder["metadata"]["name"])["spec"]["nodeName"] == added
    world.inventory()
    with world.system.ctx.store.read() as s:
        node = NodeRepo(s).get(added)
    assert not any(g.outside for g in node.gpus)  # the placeholder is not use outside gpupool
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    assert req.state is RequestState.FULFILLED
    # the node is there: the placeholder goes (and only gpupool's own)
    assert [p["metadata"]["name"] for p in kube.pods_of(pr.PLACEHOLDER)] == ["d"]
    world.loop("scheduler").run_once()
    assert world.get(wid)["allocation"]["nodes"] == [added]
    assert pr.CONSUME not in _one_pod_of(kube, wid)["metadata"]["annotations"]


def test_conditions_and_the_crd_rules():
    def obj(kind, status="True", message="m"):
        cond = {"type": kind, "status": status, "reason": "R", "message": message}
        return {"status": {"conditions": [cond]}}

    assert pr.request_state(obj("Provisioned"))[0] is RequestState.FULFILLED
    assert pr.request_state(obj("Provisioned", "False"))[0] is RequestState.OPEN
    assert pr.request_state(obj("Accepted"))[0] is RequestState.OPEN
    for kind in ("Failed", "CapacityRevoked", "BookingExpired"):
        state, why = pr.request_state(obj(kind, message="zone out of H100"))
        assert state is RequestState.WITHDRAWN and kind in why and "zone out of H100" in why
    good = pr.provisioning_request("r-1", NS, POOL, [("r-1-0", 2)], pr.CHECK_CAPACITY, ["w"])
    assert problems(good) == [] and "parameters" not in good["spec"]
    bad = pr.provisioning_request("r-1", NS, POOL, [("r-1-0", 0)], pr.ATOMIC, ["w"])
    assert any("count" in p for p in problems(bad))
