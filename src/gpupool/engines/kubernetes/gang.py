"""Multi-node workloads (gangs) on Kubernetes: one pod per node, created by gpupool, and a
headless Service. Builders and the gang's combined state are pure; `create_all` makes them.

Why not an Indexed Job: a Job has one pod template, so it cannot pin index i to node i
(per-index node affinity is not expressible); pinning the set instead (affinity on the N
nodes plus anti-affinity between the pods) lets kube-scheduler put any index on any of the
nodes, so gpupool could not say which pod holds which of the GPUs it recorded (the inventory
and adoption read each pod's GPU annotations), and the Job controller's retries
(`backoffLimit`) would restart single pods of a gang that must start and end together. So
gpupool creates the N pods itself, each exactly the pod a one-node workload gets (pinned by
required node affinity to its node, the GPU limit, the annotations) plus:

* `hostname: <pod name>` and `subdomain: <service>`, with a headless Service (clusterIP None,
  `publishNotReadyAddresses`) selecting the gang's pods: each pod is reachable as
  `<pod>.<service>` — the names an Indexed Job would give (`<job>-<index>.<service>`), so a
  script written for one works;
* the gang environment (`gpupool.engines.common.gangenv`): MASTER_ADDR = rank 0's DNS name,
  MASTER_PORT, NNODES, NPROC_PER_NODE, GPUS_PER_NODE, WORLD_SIZE, and its own NODE_RANK, in
  the spec (the workload's declared `env` is read from its one Secret, shared by the pods);
* the label `gpupool.dev/gang-rank` and the annotation `gpupool.dev/gang-size`.

The gang's state is that of all its pods together (`gang_view`): failed as soon as one pod
failed, succeeded once all succeeded, running once all run (or ended well), else starting.
The executor stops, rejects and prunes all pods and the Service together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpupool.domain import Allocation, Enforcement, Workload
from gpupool.engines.common.gangenv import DEFAULT_MASTER_PORT, gang_env
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.client import KubeError

if TYPE_CHECKING:
    from gpupool.engines.kubernetes.client import KubeApi, ObjectApi

RANK = "gpupool.dev/gang-rank"
SIZE = "gpupool.dev/gang-size"


def service_name(workload_id: str) -> str:
    return m.pod_name(workload_id)


def member_name(workload_id: str, rank: int) -> str:
    """Pod `rank` of a gang: `gp-<id>-<rank>` (a DNS label)."""
    return f"{m.pod_name(workload_id)[:55].rstrip('-')}-{rank}"


def part_of(allocation: Allocation, node: str) -> Allocation:
    """The one-node allocation of `allocation`'s part on `node`."""
    return Allocation(
        allocation.workload_id,
        node,
        allocation.on_node(node),
        allocation.since,
        allocation.cpu_milli,
        allocation.memory_mib,
    )


def build_service(workload: Workload, settings: m.PodSettings) -> dict[str, Any]:
    """The headless Service that names the gang's pods (`<pod>.<service>`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(workload.id),
            "namespace": m.namespace_for(workload.tenant, settings.namespace_prefix),
            "labels": {m.MANAGED_BY: "gpupool", m.WORKLOAD: m.label_value(workload.id)},
            "annotations": {m.WORKLOAD: workload.id},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {m.MANAGED_BY: "gpupool", m.WORKLOAD: m.label_value(workload.id)},
            "ports": [{"name": "rendezvous", "port": DEFAULT_MASTER_PORT, "protocol": "TCP"}],
        },
    }


def build_gang(
    workload: Workload,
    allocation: Allocation,
    settings: m.PodSettings,
    resources: Callable[[Allocation], tuple[dict[str, str], Enforcement | None]],
    started_at: float,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Enforcement]]:
    """(the Service, the pods in rank order, enforcement per GPU uuid) of a gang.
    `resources(part)` gives the GPU limits of one node's part (`manifests.gpu_resources` with
    that node's allocatable). Raises ManifestError as `build_pod` does."""
    svc = build_service(workload, settings)
    ns = svc["metadata"]["namespace"]
    master = f"{member_name(workload.id, 0)}.{svc['metadata']['name']}.{ns}.svc"
    shared_env = gang_env(allocation, master_addr=master)
    pods = []
    enforcement: dict[str, Enforcement] = {}
    nodes = allocation.nodes
    for rank, node in enumerate(nodes):
        part = part_of(allocation, node)
        limits, shared = resources(part)
        enf = {s.gpu_uuid: shared if shared is not None else s.enforcement for s in part.shares}
        enforcement.update(enf)
        pod = m.build_pod(
            workload,
            part,
            settings,
            node=node,
            gpu_limits=limits,
            enforcement=enf,
            started_at=started_at,
            env=env,
            plain_env={**shared_env, "NODE_RANK": str(rank)},
        )
        name = member_name(workload.id, rank)
        pod["metadata"]["name"] = name
        pod["metadata"]["labels"][RANK] = str(rank)
        pod["metadata"]["annotations"][SIZE] = str(len(nodes))
        pod["spec"]["hostname"] = name
        pod["spec"]["subdomain"] = svc["metadata"]["name"]
        pods.append(pod)
    return svc, pods, enforcement


def create_all(
    api: KubeApi,
    objects: ObjectApi,
    svc: dict[str, Any],
    pods: list[dict[str, Any]],
    adopt: Callable[[str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Create the Service and the pods (one that exists already: `adopt(name)`, a start
    retried after a lost answer); all or nothing: on a refusal, what was made is deleted and
    the KubeError raised. The only I/O of this module, through `api` and `objects`."""
    ns = svc["metadata"]["namespace"]
    made: list[dict[str, Any]] = []
    try:
        try:
            objects.create(svc)
        except KubeError as e:
            if e.status != 409:
                raise
        for pod in pods:
            try:
                made.append(api.create_pod(ns, pod))
            except KubeError as e:
                if e.status != 409:
                    raise
                made.append(adopt(pod["metadata"]["name"]))
    except KubeError:
        for pod in made:
            with contextlib.suppress(KubeError):
                api.delete_pod(ns, pod["metadata"]["name"], 0)
        with contextlib.suppress(KubeError):
            objects.delete("Service", ns, svc["metadata"]["name"])
        raise
    return made


def gang_size(pod: Mapping[str, Any]) -> int:
    """How many pods the gang of `pod` has (1: not a gang)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SIZE, "1")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def rank_of(pod: Mapping[str, Any]) -> int:
    raw = ((pod.get("metadata") or {}).get("labels") or {}).get(RANK, "0")
    return int(raw) if str(raw).isdigit() else 0


def gang_view(pods: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """One pod standing for the whole gang, for `podstatus.status_of`: a failed pod if any;
    else, while some pod is missing or not yet running, a Pending one; else a running one;
    else (all succeeded) the first."""
    pods = sorted(pods, key=rank_of)
    for p in pods:
        if (p.get("status") or {}).get("phase") == "Failed":
            return p
    if len(pods) < size:
        first = dict(pods[0]) if pods else {}
        return {**first, "status": {"phase": "Pending"}}
    for p in pods:
        if (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Unknown"):
            return p
    for p in pods:
        if (p.get("status") or {}).get("phase") == "Running":
            return p
    return pods[0]
