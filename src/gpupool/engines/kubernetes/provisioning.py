"""The objects gpupool makes to have the cluster's autoscaler add nodes (issue 34), pure.

- A `ProvisioningRequest` (``autoscaling.x-k8s.io/v1``, the Cluster Autoscaler's API) per
  tenant namespace of the waiting work, with one `PodTemplate` per waiting shape (the
  resources gpupool's pod will ask for on one node, and the pool's labels as its node
  selector, so that the autoscaler scales the pool's node group). Its class is
  ``best-effort-atomic-scale-up.autoscaling.x-k8s.io`` (all its pods' capacity or none,
  retried until ``ValidUntilSeconds``: the pool's request timeout) for a gang always, and by
  default for other work too; ``check-capacity.autoscaling.x-k8s.io`` (only asks whether the
  capacity is there, adds no node) where the admin chose it.
- Where the cluster has no ProvisioningRequest API (the CRD is absent), placeholder pods of
  the same shapes at the lowest priority (`PLACEHOLDER_PRIORITY`, PriorityClass
  `PLACEHOLDER_CLASS`, never preempting): the autoscaler adds nodes for them like for any
  pending pod, and gpupool's own pods, at the default priority 0, preempt them. The inventory
  does not count them as capacity used outside gpupool.

`request_state` reads a request's conditions: ``Provisioned=True`` fulfilled; ``Failed``,
``CapacityRevoked`` or ``BookingExpired`` ``True`` withdrawn, with the condition's message.

A request's PodTemplates are made after it and owned by it (`owner_reference`: its uid,
``controller: true``), so whoever deletes the ProvisioningRequest (gpupool when the request
is over, the autoscaler's own clean-up, an admin) has the API server's garbage collector
delete its templates too. No ``blockOwnerDeletion``: that would need the right to update the
request's finalizers, which gpupool does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.domain import Workload
from gpupool.domain.nodepools import POOL_LABEL, NodePool, RequestState
from gpupool.engines.kubernetes.inventory import PLACEHOLDER, PLACEHOLDER_CLASS
from gpupool.engines.kubernetes.manifests import GPU, MANAGED_BY

#: label of a placeholder pod (its value: the request's id), and its PriorityClass
__all__ = ["PLACEHOLDER", "PLACEHOLDER_CLASS"]

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
CLASSES = (ATOMIC, CHECK_CAPACITY)
#: on gpupool's pods admitted for a request: the request they consume, and its class
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
#: label of every object made for a node request: the request's id
REQUEST_LABEL = "gpupool.dev/node-request"
POOL = "gpupool.dev/node-pool"
#: annotation of a ProvisioningRequest: the workloads it is for (comma separated)
FOR_WORKLOADS = "gpupool.dev/for-workloads"
#: below every workload's priority (the default is 0); placeholders never preempt
PLACEHOLDER_PRIORITY = -1_000_000
#: what a placeholder and a template run: nothing (the pause image)
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True, slots=True)
class Shape:
    """What gpupool's pod of a workload asks on one node: whole GPUs, milli-CPU, MiB."""

    gpus: int
    cpu_milli: int
    memory_mib: int


def shape_of(w: Workload) -> Shape:
    """One node's part of `w` (a fraction or MIG slice asks for a whole GPU of a new node:
    the node's sharing is the node's own)."""
    r = w.request
    whole = r.gpus // max(1, r.nodes)
    return Shape(whole or (1 if (r.gpu_milli or r.mig) else 0), r.cpu_milli, r.memory_mib)


def node_selector(pool: NodePool) -> dict[str, str]:
    """The labels a node of `pool` has: the pool's own and `POOL_LABEL`."""
    return {**pool.label_map, POOL_LABEL: pool.name}


def _pod_spec(pool: NodePool, shape: Shape) -> dict[str, Any]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if shape.cpu_milli:
        requests["cpu"] = f"{shape.cpu_milli}m"
    if shape.memory_mib:
        requests["memory"] = limits["memory"] = f"{shape.memory_mib}Mi"
    if shape.gpus:
        limits[GPU] = str(shape.gpus)
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    spec: dict[str, Any] = {
        "nodeSelector": node_selector(pool),
        "containers": [{"name": "capacity", "image": PAUSE_IMAGE, "resources": resources}],
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535},
    }
    if shape.gpus:
        spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return spec


def _labels(request: str, pool: NodePool) -> dict[str, str]:
    return {MANAGED_BY: "gpupool", REQUEST_LABEL: request, POOL: pool.name}


def owner_reference(request: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference to the ProvisioningRequest `request` (as the API server returned
    it: with its uid) that its PodTemplates carry."""
    meta = request["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProvisioningRequest",
        "name": str(meta["name"]),
        "uid": str(meta["uid"]),
        "controller": True,
    }


def pod_template(
    name: str,
    namespace: str,
    request: str,
    pool: NodePool,
    shape: Shape,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The PodTemplate a ProvisioningRequest's pod set refers to, owned by `owner` (an
    `owner_reference` to that request)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": _labels(request, pool)}
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": meta,
        "template": {"metadata": {"labels": {POOL: pool.name}}, "spec": _pod_spec(pool, shape)},
    }


def provisioning_request(
    name: str,
    namespace: str,
    pool: NodePool,
    pod_sets: Sequence[tuple[str, int]],
    klass: str,
    for_workloads: Sequence[str],
) -> dict[str, Any]:
    """A ProvisioningRequest for `pod_sets` ((PodTemplate name, count), at most 32)."""
    spec: dict[str, Any] = {
        "provisioningClassName": klass,
        "podSets": [{"podTemplateRef": {"name": t}, "count": c} for t, c in pod_sets],
    }
    if klass == ATOMIC:
        spec["parameters"] = {"ValidUntilSeconds": str(int(pool.request_timeout_seconds))}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _labels(name, pool),
            "annotations": {FOR_WORKLOADS: ",".join(for_workloads)},
        },
        "spec": spec,
    }


def placeholder_pod(
    name: str, namespace: str, request: str, pool: NodePool, shape: Shape
) -> dict[str, Any]:
    """A pod at the lowest priority holding `shape` on a node of `pool` (see the module)."""
    spec = _pod_spec(pool, shape)
    spec["priorityClassName"] = PLACEHOLDER_CLASS
    spec["terminationGracePeriodSeconds"] = 0
    labels = {PLACEHOLDER: request, POOL: pool.name, REQUEST_LABEL: request}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def priority_class() -> dict[str, Any]:
    """The placeholders' PriorityClass: below everything, never preempting."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PLACEHOLDER_CLASS, "labels": {MANAGED_BY: "gpupool"}},
        "value": PLACEHOLDER_PRIORITY,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "gpupool's placeholder pods: capacity asked of the autoscaler for "
        "waiting work; any pod preempts them",
    }


def pod_sets(work: Sequence[Workload], atomic: bool) -> list[tuple[Shape, int]]:
    """(shape, count) per distinct shape of `work` (a gang: its nodes' count of its one
    shape), in first-seen order, at most 32 (the API's limit; the rest waits for the next
    request)."""
    counts: dict[Shape, int] = {}
    for w in work:
        s = shape_of(w)
        counts[s] = counts.get(s, 0) + (w.request.nodes if atomic else 1)
    return list(counts.items())[:32]


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def booking_over(pr: Mapping[str, Any]) -> bool:
    """Whether nothing more can come of a ProvisioningRequest: ``Failed``,
    ``CapacityRevoked`` or ``BookingExpired`` is ``True`` (the capacity it booked is no
    longer held for its pods)."""
    return any(
        (c := condition(pr, kind)) is not None and c.get("status") == "True"
        for kind in ("Failed", "CapacityRevoked", "BookingExpired")
    )


def request_state(pr: Mapping[str, Any]) -> tuple[RequestState, str]:
    """Where a ProvisioningRequest stands from its conditions (see the module)."""
    for kind in ("Failed", "CapacityRevoked", "BookingExpired"):
        c = condition(pr, kind)
        if c is not None and c.get("status") == "True":
            why = str(c.get("message") or c.get("reason") or kind)
            return RequestState.WITHDRAWN, f"ProvisioningRequest {kind}: {why}"
    c = condition(pr, "Provisioned")
    if c is not None and c.get("status") == "True":
        return RequestState.FULFILLED, ""
    return RequestState.OPEN, ""
