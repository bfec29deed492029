"""Multi-node workloads (gangs) on Kubernetes: one pinned pod per node and a headless Service,
valid for Kubernetes 1.30 and 1.34 (`kubernetes-validate --strict`), driven over the fake API
server: created all at once, one state for the gang, a failed pod stops the others, a pod
stuck Pending rejects the whole gang, stop/prune remove every pod and the Service."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.kubernetes import gang as g
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from tests.kubernetes.fakeapi import container_env

kv = pytest.importorskip("kubernetes_validate")
NS = "gpupool-lab"


def _w(wid: str = "g1", nodes: int = 2, per: int = 4) -> Workload:
    return Workload(
        wid,
        "lab",
        "ann",
        Request(gpus=nodes * per, nodes=nodes, cpu_milli=2000),
        command=("torchrun", "train.py"),
    )


def _alloc(wid: str = "g1", nodes: tuple[str, ...] = ("n1", "n2"), per: int = 4) -> Allocation:
    shares = tuple(
        Share(n, i, f"k8s:{n}:{i}", 1000, 81920, Enforcement.HARDWARE)
        for n in nodes
        for i in range(per)
    )
    return Allocation(wid, nodes[0], shares, 0.0, cpu_milli=2000)


def _env(pod: dict) -> dict[str, str]:
    return container_env(pod)


def _executor(api, clock) -> KubernetesExecutor:
    return KubernetesExecutor(api, clock, allocatable=lambda n: ({"nvidia.com/gpu": "8"}, 1))


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_gang_manifests_pin_each_rank_to_its_node_and_are_valid(version):
    def res(part: Allocation):
        return m.gpu_resources(part, {m.GPU: "8"})

    svc, pods, enf = g.build_gang(
        _w(nodes=3), _alloc(nodes=("a", "b", "c")), m.PodSettings(), res, 5.0
    )
    kv.validate(svc, version, strict=True)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert svc["spec"]["selector"][m.WORKLOAD] == "g1"
    assert len(pods) == 3 and len(enf) == 12
    for rank, (pod, node) in enumerate(zip(pods, ("a", "b", "c"), strict=True)):
        kv.validate(pod, version, strict=True)
        term = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]["matchExpressions"][0]
        assert term["values"] == [node]  # each rank on the node gpupool chose for it
        assert pod["spec"]["containers"][0]["resources"]["limits"][m.GPU] == "4"  # per node
        assert pod["spec"]["hostname"] == f"gp-g1-{rank}"
        assert pod["spec"]["subdomain"] == svc["metadata"]["name"]
        env = _env(pod)
        assert env["NODE_RANK"] == str(rank) and env["NNODES"] == "3"
        assert env["WORLD_SIZE"] == "12" and env["NPROC_PER_NODE"] == "4"
        assert env["MASTER_ADDR"] == "gp-g1-0.gp-g1.gpupool-lab.svc"
        assert env["MASTER_PORT"] == "29500"
        ann = pod["metadata"]["annotations"]
        assert ann[m.GPUS] == "0,1,2,3" and ann[g.SIZE] == "3"
        assert ann[m.UUIDS].split(",")[0] == f"k8s:{node}:0"


def test_gang_runs_as_one_and_a_failed_pod_stops_the_others(kube, api, clock):
    ex = _executor(api, clock)
    h = ex.start(_w(), _alloc())
    assert set(h.enforcement) == {f"k8s:{n}:{i}" for n in ("n1", "n2") for i in range(4)}
    assert ("gpupool-lab", "gp-g1") in kube.objects["services"]
    assert {p["metadata"]["name"] for p in kube.pods_of()} == {"gp-g1-0", "gp-g1-1"}
    ex.tick()
    assert ex.poll("g1").state is ExecState.STARTING
    kube.set_phase(NS, "gp-g1-0", "Running", node="n1")
    ex.tick()
    assert ex.poll("g1").state is ExecState.STARTING  # not all of it runs yet
    kube.set_phase(NS, "gp-g1-1", "Running", node="n2")
    ex.tick()
    assert ex.poll("g1").state is ExecState.RUNNING
    assert ex.gpu_indexes_by_node() == {"n1": {0, 1, 2, 3}, "n2": {0, 1, 2, 3}}
    (run,) = ex.list_running()
    assert len(run.gpu_uuids) == 8
    # a new executor (a restarted server) adopts the gang from the list
    ex2 = _executor(api, clock)
    assert [r.workload_id for r in ex2.list_running()] == ["g1"]
    assert ex2.poll("g1").state is ExecState.RUNNING
    kube.set_phase(NS, "gp-g1-1", "Failed", exit_code=7)
    ex.tick()
    st = ex.poll("g1")
    assert st.state is ExecState.FAILED and st.exit_code == 7
    assert ("gpupool-lab", "gp-g1-0", 30) in kube.deletes  # the rest of the gang stopped


def test_gang_succeeds_once_every_pod_did_and_logs_are_per_rank(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-g1-0", "Succeeded", node="n1", exit_code=0)
    kube.set_phase(NS, "gp-g1-1", "Running", node="n2")
    ex.tick()
    assert ex.poll("g1").state is ExecState.RUNNING
    kube.set_phase(NS, "gp-g1-1", "Succeeded", exit_code=0)
    kube.write_log(NS, "gp-g1-0", "hello from 0\n")
    kube.write_log(NS, "gp-g1-1", "hello from 1\n")
    ex.tick()
    assert ex.poll("g1").state is ExecState.SUCCEEDED
    log = ex.logs("g1")
    assert "== rank 0 (gp-g1-0) ==\nhello from 0" in log and "hello from 1" in log
    clock.advance(100)
    assert ex.prune(10) == ["g1"]
    assert kube.pods_of() == [] and kube.objects["services"] == {}


def test_a_gang_pod_stuck_pending_rejects_the_whole_gang(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-g1-0", "Running", node="n1")
    kube.set_unschedulable(NS, "gp-g1-1", "0/2 nodes are available: Insufficient nvidia.com/gpu")
    clock.advance(31)
    ex.tick()
    st = ex.poll("g1")
    assert st.state is ExecState.REJECTED and "Insufficient nvidia.com/gpu" in st.message
    assert kube.pods_of() == [] and kube.objects["services"] == {}


def test_stop_deletes_every_pod_and_the_service(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-g1-0", "Running", node="n1")
    kube.set_phase(NS, "gp-g1-1", "Running", node="n2")
    ex.tick()
    ex.stop("g1", "preempted for w9", grace_s=30)
    assert {(ns, n) for ns, n, _ in kube.deletes} == {(NS, "gp-g1-0"), (NS, "gp-g1-1")}
    assert kube.objects["services"] == {}
    ex.tick()
    assert ex.poll("g1").state is ExecState.RUNNING  # terminating within the grace
    clock.advance(31)
    ex.tick()  # still there after the grace: every pod forced
    assert {(n, gr) for _, n, gr in kube.deletes[-2:]} == {("gp-g1-0", 0), ("gp-g1-1", 0)}
    ex.tick()
    st = ex.poll("g1")
    assert (st.state, st.exit_code, st.stop_reason) == (ExecState.FAILED, 137, "preempted for w9")


def test_a_refused_pod_removes_the_rest_of_the_gang(kube, api, clock):
    """All or nothing at creation too: the namespace's quota admits the first pod, refuses
    the second; the first pod and the Service are deleted and the start fails (retried)."""
    kube.add_quota(NS, "gpus", 4)
    ex = _executor(api, clock)
    with pytest.raises(StartError, match="ResourceQuota refused a pod of the gang"):
        ex.start(_w(), _alloc())
    assert kube.pods_of() == [] and kube.objects["services"] == {}
    assert ("gpupool-lab", "gp-g1-0", 0) in kube.deletes
