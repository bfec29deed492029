"""Pure builders of the Kubernetes objects the engine creates (plain dicts, no I/O).

A workload becomes one Pod in its tenant's namespace, pinned by *required node affinity* on
`kubernetes.io/hostname` to the node gpupool's scheduler chose; kube-scheduler still binds it
(gpupool never sets `nodeName`). The pod asks the device plugin for what the allocation holds:

- whole GPUs: `limits: {nvidia.com/gpu: N}`;
- a fraction of a GPU: one replica of the node's shared resource (`nvidia.com/gpu.shared`
  from time-slicing with `renameByDefault`, or `nvidia.com/gpu` on a node whose GPU Feature
  Discovery label `nvidia.com/gpu.replicas` is above 1). Time-slicing isolates nothing, so
  such a share is recorded with enforcement `none`;
- a MIG instance: `limits: {nvidia.com/mig-<profile>: 1}` (the GPU Operator's `mixed`
  strategy), enforcement `hardware`. The device plugin picks which instance of that profile
  on the node the pod gets; gpupool counts the node's instances of each profile, so the
  instance (start) it records is a slot of that count, not a particular one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.domain import Allocation, Enforcement, Workload

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
#: the mixed strategy's resource of one MIG instance of a profile: MIG_PREFIX + "1g.10gb"
MIG_PREFIX = "nvidia.com/mig-"
HOSTNAME = "kubernetes.io/hostname"
MANAGED_BY = "app.kubernetes.io/managed-by"
WORKLOAD = "gpupool.dev/workload"
TENANT = "gpupool.dev/tenant"
USER = "gpupool.dev/user"
#: annotations: where gpupool placed the work, so a restarted server can adopt it
GPUS = "gpupool.dev/gpu-indexes"
UUIDS = "gpupool.dev/gpu-uuids"
ENFORCEMENT = "gpupool.dev/enforcement"
STARTED_AT = "gpupool.dev/started-at"
OWNER = "gpupool.dev/owner"
#: label selector of every pod gpupool created
SELECTOR = f"{MANAGED_BY}=gpupool"


class ManifestError(ValueError):
    """The allocation cannot be expressed as a pod on that node; the message says why."""


@dataclass(frozen=True)
class PodSettings:
    """What every pod gets. `image`: the container image of jobs (a workload names only its
    command); `namespace_prefix`: tenant `a/b` runs in namespace `<prefix>a-b`."""

    image: str = "python:3.12-slim"
    namespace_prefix: str = "gpupool-"
    grace_s: int = 30
    pull_policy: str = "IfNotPresent"
    #: PriorityClasses and RuntimeClasses a notebook's pod template may name (others dropped)
    priority_classes: tuple[str, ...] = ()
    runtime_classes: tuple[str, ...] = ()


def _dns(text: str, limit: int = 63) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return out[:limit].rstrip("-") or "x"


def label_value(text: str) -> str:
    """A valid label value for `text` (<= 63 chars of [A-Za-z0-9._-], alphanumeric ends)."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", out)


def namespace_for(tenant: str, prefix: str = "gpupool-") -> str:
    """The namespace of `tenant`: `<prefix><tenant with / as ->`, a DNS label."""
    return _dns(prefix + tenant.replace("/", "-"))


def pod_name(workload_id: str) -> str:
    """The pod of a workload: `gp-<id>` as a DNS label (one pod per workload)."""
    return _dns(f"gp-{workload_id}")


def gpu_resources(
    allocation: Allocation | None, node_allocatable: Mapping[str, str], replicas: int = 1
) -> tuple[dict[str, str], Enforcement | None]:
    """The extended-resource limits for `allocation` on a node that advertises
    `node_allocatable`, and the enforcement its shares get: `hardware` for whole GPUs (the
    device plugin gives the container only its own GPUs' device nodes), `none` for a
    time-sliced fraction (nothing isolates it). Raises ManifestError when the node offers no
    resource that fits."""
    if allocation is None or not allocation.shares:
        return {}, None
    migs = [s.mig_profile for s in allocation.shares if s.mig_profile is not None]
    if migs:
        (profile,) = migs  # one MIG instance per workload
        resource = MIG_PREFIX + profile
        if int(node_allocatable.get(resource, "0") or 0) <= 0:
            raise ManifestError(
                f"node {allocation.node} offers no {resource}: the MIG manager has not cut its "
                "GPUs into the layout gpupool has; apply `gpupool k8s gpu-operator-config` and "
                "label the node as it prints"
            )
        return {resource: "1"}, Enforcement.HARDWARE
    whole = [s for s in allocation.shares if s.whole]
    if len(whole) == len(allocation.shares):
        if replicas > 1:
            raise ManifestError(
                f"node {allocation.node} shares every GPU by time-slicing ({GPU} is "
                f"{replicas} replicas per GPU): a whole GPU cannot be requested there; set "
                "renameByDefault in the device plugin's sharing config"
            )
        return {GPU: str(len(whole))}, Enforcement.HARDWARE
    if len(allocation.shares) != 1:
        raise ManifestError("a fractional allocation holds exactly one share")
    if int(node_allocatable.get(GPU_SHARED, "0") or 0) > 0:
        return {GPU_SHARED: "1"}, Enforcement.NONE
    if replicas > 1:
        return {GPU: "1"}, Enforcement.NONE
    raise ManifestError(
        f"node {allocation.node} offers no shared GPU resource ({GPU_SHARED} or "
        f"{GPU} with sharing replicas): enable time-slicing in the NVIDIA device plugin, "
        "or set this GPU's sharing mode back to exclusive"
    )


def build_pod(
    workload: Workload,
    allocation: Allocation | None,
    settings: PodSettings,
    *,
    node: str | None,
    gpu_limits: Mapping[str, str],
    enforcement: Mapping[str, Enforcement],
    started_at: float,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Pod manifest of `workload` (see the module docstring). `node` is None for
    CPU-only work, which kube-scheduler places anywhere."""
    if not workload.command:
        raise ManifestError(f"workload {workload.id} has no command to run")
    limits: dict[str, str] = dict(gpu_limits)
    requests: dict[str, str] = {}
    req = workload.request
    if req.cpu_milli:
        requests["cpu"] = f"{req.cpu_milli}m"
    if req.memory_mib:
        requests["memory"] = f"{req.memory_mib}Mi"
        limits["memory"] = f"{req.memory_mib}Mi"
    variables = {
        **(env or {}),
        "GPUPOOL_WORKLOAD_ID": workload.id,
        "GPUPOOL_GPU_MILLI": str(allocation.gpu_milli if allocation else 0),
    }
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    container: dict[str, Any] = {
        "name": "work",
        "image": settings.image,
        "imagePullPolicy": settings.pull_policy,
        "command": list(workload.command),
        "env": [{"name": k, "value": v} for k, v in sorted(variables.items())],
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    shares = allocation.shares if allocation else ()
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": settings.grace_s,
        "containers": [container],
        "automountServiceAccountToken": False,
    }
    if node is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        }
    if gpu_limits:
        spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(workload.id),
            "namespace": namespace_for(workload.tenant, settings.namespace_prefix),
            "labels": {
                MANAGED_BY: "gpupool",
                WORKLOAD: label_value(workload.id),
                TENANT: label_value(workload.tenant.replace("/", "-")),
                USER: label_value(workload.owner),
            },
            "annotations": {
                WORKLOAD: workload.id,
                OWNER: workload.owner,
                TENANT: workload.tenant,
                GPUS: ",".join(str(s.gpu_index) for s in shares),
                UUIDS: ",".join(s.gpu_uuid for s in shares),
                ENFORCEMENT: ",".join(f"{u}={e}" for u, e in sorted(enforcement.items())),
                STARTED_AT: repr(started_at),
            },
        },
        "spec": spec,
    }


def namespace_manifest(name: str, tenant: str) -> dict[str, Any]:
    """The namespace of a tenant, labelled so gpupool and policies can find it."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY: "gpupool", TENANT: label_value(tenant.replace("/", "-"))},
        },
    }
