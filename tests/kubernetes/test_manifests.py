"""The pod builder's output: pinned by node affinity, never bound, the right GPU resource,
valid for Kubernetes 1.30 and 1.34 (`kubernetes-validate --strict`, offline)."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload
from gpupool.engines.kubernetes import manifests as m

kv = pytest.importorskip("kubernetes_validate")


def _w(**kw) -> Workload:
    base = dict(
        id="W-01ABC",
        tenant="lab/vision",
        owner="ann",
        command=("python", "train.py"),
        request=Request(gpus=2, cpu_milli=4000, memory_mib=8192),
    )
    base.update(kw)
    return Workload(**base)


def _alloc(n: int = 2, milli: int = 1000) -> Allocation:
    shares = tuple(
        Share("gpu-node-1", i, f"k8s:gpu-node-1:{i}", milli, 81920, Enforcement.HARDWARE)
        for i in range(n)
    )
    return Allocation("W-01ABC", "gpu-node-1", shares, 0.0)


def _pod(alloc: Allocation | None, limits: dict[str, str], **kw) -> dict:
    return m.build_pod(
        _w(**kw),
        alloc,
        m.PodSettings(),
        node=alloc.node if alloc else None,
        gpu_limits=limits,
        enforcement={},
        started_at=12.5,
    )


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_whole_gpu_pod_is_pinned_by_affinity_and_valid(version):
    limits, shared = m.gpu_resources(_alloc(), {m.GPU: "8"})
    assert limits == {m.GPU: "2"} and shared is Enforcement.HARDWARE  # the device plugin
    pod = _pod(_alloc(), limits)
    kv.validate(pod, version, strict=True)
    spec = pod["spec"]
    assert "nodeName" not in spec  # kube-scheduler binds, never gpupool
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-1"]}
    ]
    res = spec["containers"][0]["resources"]
    assert res["limits"][m.GPU] == "2" and res["requests"]["cpu"] == "4000m"
    meta = pod["metadata"]
    assert meta["namespace"] == m.namespace_for("lab/vision") and meta["name"] == "gp-w-01abc"
    assert meta["labels"][m.WORKLOAD] == "W-01ABC" and meta["labels"][m.USER] == "ann"
    assert meta["labels"][m.MANAGED_BY] == "gpupool"
    assert meta["annotations"][m.STARTED_AT] == "12.5"


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_fraction_uses_the_shared_resource_with_no_enforcement(version):
    alloc = _alloc(1, 250)
    limits, shared = m.gpu_resources(alloc, {m.GPU_SHARED: "16"})
    assert limits == {m.GPU_SHARED: "1"} and shared is Enforcement.NONE
    kv.validate(_pod(alloc, limits), version, strict=True)
    # GFD sharing replicas without renaming: one replica of nvidia.com/gpu
    assert m.gpu_resources(alloc, {m.GPU: "16"}, replicas=4) == ({m.GPU: "1"}, Enforcement.NONE)


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_cpu_only_pod_has_no_affinity_and_is_valid(version):
    pod = _pod(None, {}, request=Request())
    kv.validate(pod, version, strict=True)
    assert "affinity" not in pod["spec"] and "tolerations" not in pod["spec"]


def test_a_fraction_on_a_node_without_shared_resource_is_refused_with_advice():
    with pytest.raises(m.ManifestError, match="time-slicing"):
        m.gpu_resources(_alloc(1, 500), {m.GPU: "8"})
    with pytest.raises(m.ManifestError, match="renameByDefault"):
        m.gpu_resources(_alloc(1), {m.GPU: "32"}, replicas=4)


def test_validation_catches_a_typo_so_the_check_is_real():
    pod = _pod(_alloc(), {m.GPU: "2"})
    pod["spec"]["containers"][0]["resources"]["limit"] = {"cpu": "1"}
    with pytest.raises(kv.ValidationError):
        kv.validate(pod, "1.34.0", strict=True)


def test_names_are_dns_labels():
    assert m.namespace_for("lab-vision", "gp-") == "gp-lab-vision"  # plain stays readable
    assert m.namespace_for("Lab/Vision_2", "gp-").startswith("gp-lab-vision-2-h")
    assert len(m.pod_name("x" * 100)) <= 63
    assert m.label_value("ann@example.org") == "ann-example.org"
