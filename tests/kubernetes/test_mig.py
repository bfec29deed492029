"""MIG on Kubernetes: `nvidia.com/mig-<profile>` resources of the mixed strategy in pod
manifests (validated offline for 1.30 and 1.34) and in the inventory."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, SharingMode, Workload
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.engine import KubernetesEngine

kv = pytest.importorskip("kubernetes_validate")

GFD_MIXED = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/mig.strategy": "mixed",
}


def _alloc(profile: str = "3g.40gb", start: int = 4) -> Allocation:
    share = Share("gpu-node-1", 0, "k8s:gpu-node-1:0", 428, 39936, Enforcement.HARDWARE,
                  mig_profile=profile, mig_start=start)  # fmt: skip
    return Allocation("W-01ABC", "gpu-node-1", (share,), 0.0)


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_mig_instance_pod_asks_for_the_mixed_strategy_resource(version):
    limits, enforcement = m.gpu_resources(_alloc(), {"nvidia.com/mig-3g.40gb": "2"})
    assert limits == {"nvidia.com/mig-3g.40gb": "1"} and enforcement is Enforcement.HARDWARE
    w = Workload("W-01ABC", "lab/vision", "ann", Request(mig="3g.40gb"), command=("python",))
    pod = m.build_pod(
        w,
        _alloc(),
        m.PodSettings(),
        node="gpu-node-1",
        gpu_limits=limits,
        enforcement={},
        started_at=1.0,
    )
    kv.validate(pod, version, strict=True)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert m.GPU not in pod["spec"]["containers"][0]["resources"]["limits"]


def test_a_node_without_that_mig_resource_is_refused_with_what_to_do():
    with pytest.raises(m.ManifestError, match="gpupool k8s gpu-operator-config"):
        m.gpu_resources(_alloc(), {"nvidia.com/mig-1g.10gb": "7", m.GPU: "1"})


def _engine(kube, clock) -> KubernetesEngine:
    engine = KubernetesEngine(api_client=kube.client())
    engine.open(EngineEnv(clock))
    return engine


def test_inventory_reads_mixed_strategy_mig_resources_as_a_layout(kube, clock):
    kube.add_node("mixed", 1, labels=GFD_MIXED, extra={"nvidia.com/mig-1g.10gb": "7"})
    kube.add_node(
        "odd", 0, labels=GFD_MIXED, extra={"nvidia.com/mig-3g.40gb": "3"}
    )  # 3 over 2 GPUs: no even split
    nodes = {n.name: n for n in _engine(kube, clock).inventory()}
    plain, cut = nodes["mixed"].gpus
    assert plain.sharing is SharingMode.EXCLUSIVE and plain.mig_layout is None
    assert cut.sharing is SharingMode.MIG and cut.mig_layout == "1g.10gb:7"
    assert [g.sharing for g in nodes["odd"].gpus] == [SharingMode.MIG] * 2
    assert [g.mig_layout for g in nodes["odd"].gpus] == [None, None]
