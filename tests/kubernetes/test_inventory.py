"""Nodes from the Kubernetes API: GFD labels, cordon/NotReady, GPUs used outside gpupool."""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.domain import GPUHealth, NodeState, OutsideUse, SharingMode
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.kubernetes.engine import KubernetesEngine
from gpupool.engines.kubernetes.inventory import memory_mib

GFD = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.count": "4",
}


def _engine(kube, clock) -> KubernetesEngine:
    engine = KubernetesEngine(api_client=kube.client())
    engine.open(EngineEnv(clock))
    return engine


def test_gpu_nodes_with_gfd_labels(kube, clock):
    kube.add_node("n1", 4, labels=GFD)
    kube.add_node("cpu-only", 0)
    kube.add_node(
        "ts",
        0,
        labels={"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.count": "2"},
        extra={"nvidia.com/gpu.shared": "8"},
    )
    nodes = {n.name: n for n in _engine(kube, clock).inventory()}
    assert set(nodes) == {"n1", "ts"}
    n1 = nodes["n1"]
    assert [g.uuid for g in n1.gpus] == [f"k8s:n1:{i}" for i in range(4)]
    assert {g.model for g in n1.gpus} == {"NVIDIA-H100-80GB-HBM3"}
    assert {g.memory_mib for g in n1.gpus} == {81559}
    assert {g.sharing for g in n1.gpus} == {SharingMode.EXCLUSIVE}
    assert n1.cpu_milli == 16000 and n1.memory_mib == 65536 and n1.state is NodeState.READY
    assert len(nodes["ts"].gpus) == 2 and nodes["ts"].gpus[0].sharing is SharingMode.SHARED


def test_cordoned_is_draining_and_not_ready_is_down(kube, clock):
    kube.add_node("a", 1)
    kube.add_node("b", 1)
    engine = _engine(kube, clock)
    kube.cordon("a")
    kube.set_node_ready("b", False)
    states = {n.name: n.state for n in engine.inventory()}
    assert states == {"a": NodeState.DRAINING, "b": NodeState.DOWN}


def test_gpus_used_by_pods_gpupool_did_not_create_are_taken(kube, clock):
    kube.add_node("n1", 4, labels=GFD)
    kube.namespaces["ml"] = {"metadata": {"name": "ml"}}
    kube.add_pod(
        {
            "metadata": {"name": "other", "namespace": "ml", "labels": {}},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ],
            },
            "status": {"phase": "Running", "startTime": "2026-11-25T10:00:00Z"},
        }
    )
    kube.add_pod(
        {  # finished: holds nothing
            "metadata": {"name": "done", "namespace": "ml", "labels": {}},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
            "status": {"phase": "Succeeded"},
        }
    )
    (n1,) = _engine(kube, clock).inventory()
    # healthy, but taken by the pod, named (the device plugin does not say which boards:
    # the highest free slots)
    assert [g.health for g in n1.gpus] == [GPUHealth.HEALTHY] * 4
    pod = OutsideUse("pod ml/other", "", since=datetime(2026, 11, 25, 10, tzinfo=UTC).timestamp())
    assert [g.outside for g in n1.gpus] == [None, None, pod, pod]
    assert [g.schedulable for g in n1.gpus] == [True, True, False, False]
    assert n1.label_map["gpupool.dev/outside-gpus"] == "2"


def _pod(ns: str, name: str, gpus: int) -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": {}},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def test_each_outside_slot_names_its_own_pod(kube, clock):
    kube.add_node("n1", 4, labels=GFD)
    kube.namespaces["team-x"] = {"metadata": {"name": "team-x"}}
    kube.add_pod(_pod("team-x", "train-0", 2))
    kube.add_pod(_pod("default", "probe", 1))
    (n1,) = _engine(kube, clock).inventory()
    refs = [g.outside.ref if g.outside else None for g in n1.gpus]
    # pods in namespace/name order take the highest free slots
    assert refs == [None, "pod team-x/train-0", "pod team-x/train-0", "pod default/probe"]
    assert n1.label_map["gpupool.dev/outside-gpus"] == "3"


def test_a_pod_labelled_as_a_placeholder_counts_unless_it_runs_at_the_placeholders_priority():
    """gpupool's placeholder pods hold GPUs any pod preempts: not use outside gpupool. The
    label alone, which anyone may put on a pod in any namespace, hides no GPU."""
    from gpupool.engines.kubernetes.inventory import PLACEHOLDER, PLACEHOLDER_CLASS, outside_use

    disguised = _pod("team-x", "train", 2)
    disguised["metadata"]["labels"] = {PLACEHOLDER: "gpupool-1-1"}
    holder = _pod("gpupool-lab", "gpupool-1-1-0", 1)
    holder["metadata"]["labels"] = {PLACEHOLDER: "gpupool-1-1"}
    holder["spec"]["priorityClassName"] = PLACEHOLDER_CLASS
    assert outside_use([disguised, holder], {}) == {"n1": 2}


def test_outside_use_spares_the_slots_gpupools_own_pods_hold(kube, clock):
    from gpupool.domain import Allocation, Enforcement, Request, Share, Workload

    kube.add_node("n1", 2, labels={"nvidia.com/gpu.count": "2"})
    engine = _engine(kube, clock)
    share = Share("n1", 1, "k8s:n1:1", 1000, 1, Enforcement.HARDWARE)
    assert engine.executor is not None
    engine.executor.start(
        Workload("w1", "lab", "ann", Request(gpus=1), command=("x",)),
        Allocation("w1", "n1", (share,), 0.0),
    )
    kube.add_pod(
        {
            "metadata": {"name": "other", "namespace": "default", "labels": {}},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
            "status": {"phase": "Running"},
        }
    )
    kube.set_phase("gpupool-lab", "gp-w1", "Running", node="n1")
    engine.executor.tick()
    (n1,) = engine.inventory()
    assert [g.health for g in n1.gpus] == [GPUHealth.HEALTHY, GPUHealth.HEALTHY]
    assert [g.outside and g.outside.ref for g in n1.gpus] == ["pod default/other", None]


def test_quantities():
    assert memory_mib("64Gi") == 65536 and memory_mib("1024Ki") == 1
    assert memory_mib("1000Mi") == 1000
