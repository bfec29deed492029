"""Nodes and GPUs from the Kubernetes API (pure: objects in, domain nodes out).

One domain `Node` per Kubernetes Node that offers GPUs (`nvidia.com/gpu` or
`nvidia.com/gpu.shared` allocatable):

- GPU count: GPU Feature Discovery's `nvidia.com/gpu.count`, else allocatable
  `nvidia.com/gpu` (divided by `nvidia.com/gpu.replicas` when time-slicing shares it);
  model from `nvidia.com/gpu.product`, memory (MiB) from `nvidia.com/gpu.memory`;
  UUIDs are gpupool's own (`k8s:<node>:<index>`): the device plugin, not gpupool, picks the
  device, so a GPU index is a slot of the node's capacity, not a particular board;
- sharing: `shared` when the node advertises a time-sliced resource (replicas > 1 or
  `nvidia.com/gpu.shared`), else `exclusive`; `mig` when `nvidia.com/mig.strategy` is
  `single` (each MIG slice is then one `nvidia.com/gpu`); with the `mixed` strategy, the
  GPUs beyond those `nvidia.com/gpu` counts are `mig`, and their layout is the node's
  `nvidia.com/mig-<profile>` resources split evenly over them (`PROFILE:COUNT,...`; none
  when they do not split evenly or do not fit the model). The admin's layout of a known GPU
  is kept (gpupool.store.NodeRepo.upsert);
- state: cordoned (`spec.unschedulable`) -> draining; Ready condition not True -> down;
- capacity used outside gpupool: GPUs requested by live pods gpupool did not create are
  taken. The device plugin does not say which board a pod got, so that many GPU slots (those
  no gpupool pod holds, highest index first, pod by pod in namespace/name order) carry
  `GPU.outside` naming their pod (`pod <namespace>/<name>`, since its start): healthy, but
  the scheduler places nothing there. The node is also labelled
  `gpupool.dev/outside-gpus=<n>`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from gpupool.domain import GPU, Node, NodeState, OutsideUse, SharingMode, ValidationError
from gpupool.domain.mig import layout_for_gpu
from gpupool.domain.nodepools import POOL_LABEL
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.native import NATIVE

#: gpupool's placeholder pods (`provisioning`): capacity asked for, not used outside gpupool
PLACEHOLDER = "gpupool.dev/placeholder"
#: their PriorityClass: the lowest, never preempting (any pod of gpupool's preempts them)
PLACEHOLDER_CLASS = "gpupool-placeholder"


def is_placeholder(pod: Mapping[str, Any]) -> bool:
    """A placeholder pod: labelled so and of the placeholders' PriorityClass, so that any
    pod preempts it (the label alone, anyone's to write, hides no GPU use)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    klass = (pod.get("spec") or {}).get("priorityClassName")
    return bool(labels.get(PLACEHOLDER)) and klass == PLACEHOLDER_CLASS


PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
COUNT = "nvidia.com/gpu.count"
REPLICAS = "nvidia.com/gpu.replicas"
MIG_STRATEGY = "nvidia.com/mig.strategy"
OUTSIDE = "gpupool.dev/outside-gpus"

_UNITS = {
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024 * 1024,
    "K": 1e3 / 2**20,
    "M": 1e6 / 2**20,
    "G": 1e9 / 2**20,
    "": 1 / 2**20,
}


def cpu_milli(q: str | None) -> int:
    """A CPU quantity ("16", "500m") in milli-CPU."""
    if not q:
        return 0
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def memory_mib(q: str | None) -> int:
    """A memory quantity ("64Gi", "1000Mi", "8e9") in MiB."""
    if not q:
        return 0
    match = re.fullmatch(r"([0-9.e+]+)(Ki|Mi|Gi|Ti|K|M|G)?", q)
    if not match:
        return 0
    return int(float(match.group(1)) * _UNITS[match.group(2) or ""])


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def node_state(node: Mapping[str, Any]) -> NodeState:
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    if not ready:
        return NodeState.DOWN
    if (node.get("spec") or {}).get("unschedulable"):
        return NodeState.DRAINING
    return NodeState.READY


def replicas_of(node: Mapping[str, Any]) -> int:
    return max(1, _int(((node.get("metadata") or {}).get("labels") or {}).get(REPLICAS), 1))


def _gpus_requested(pod: Mapping[str, Any], replicas: int) -> int:
    n = 0.0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            q = res.get(part) or {}
            if m.GPU in q or m.GPU_SHARED in q:
                n += _int(q.get(m.GPU)) / replicas + _int(q.get(m.GPU_SHARED)) / replicas
                break
    return math.ceil(n)


class OutsidePod(NamedTuple):
    """A live pod gpupool did not create that holds `gpus` GPUs of its node."""

    namespace: str
    name: str
    gpus: int
    since: float | None = None

    @property
    def use(self) -> OutsideUse:
        return OutsideUse(f"pod {self.namespace}/{self.name}", "", self.since)


def _started(pod: Mapping[str, Any]) -> float | None:
    t = (pod.get("status") or {}).get("startTime")
    try:
        return datetime.fromisoformat(str(t).replace("Z", "+00:00")).timestamp() if t else None
    except ValueError:
        return None


def outside_pods(
    pods: Iterable[Mapping[str, Any]], replicas: Mapping[str, int]
) -> dict[str, list[OutsidePod]]:
    """Per node, the live pods gpupool did not create or queue that request GPUs there (by
    namespace, then name)."""
    out: dict[str, list[OutsidePod]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(m.MANAGED_BY) == "gpupool" or labels.get(NATIVE) or is_placeholder(pod):
            continue  # gpupool's own, or queued through its webhook (its allocation holds it)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        n = _gpus_requested(pod, replicas.get(node, 1))
        if n:
            ns, name = str(meta.get("namespace") or ""), str(meta.get("name"))
            out.setdefault(node, []).append(OutsidePod(ns, name, n, _started(pod)))
    for ps in out.values():
        ps.sort()
    return out


def outside_use(pods: Iterable[Mapping[str, Any]], replicas: Mapping[str, int]) -> dict[str, int]:
    """GPUs per node requested by live pods gpupool did not create."""
    return {node: sum(p.gpus for p in ps) for node, ps in outside_pods(pods, replicas).items()}


def to_node(
    node: Mapping[str, Any],
    outside: Sequence[OutsidePod] = (),
    held: Iterable[int] = (),
) -> Node | None:
    """The domain node of a Kubernetes Node (None: it offers no GPU). `outside`: the pods
    gpupool did not create that hold GPUs there; `held`: GPU indexes gpupool's own pods hold
    there."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    replicas = replicas_of(node)
    shared = _int(alloc.get(m.GPU_SHARED))
    plain = _int(alloc.get(m.GPU))
    count = _int(labels.get(COUNT)) or (plain + shared) // replicas
    if count <= 0:
        return None
    name = meta["name"]
    if labels.get(MIG_STRATEGY) == "single":
        sharing = SharingMode.MIG
    elif replicas > 1 or shared:
        sharing = SharingMode.SHARED
    else:
        sharing = SharingMode.EXCLUSIVE
    model = labels.get(PRODUCT, "NVIDIA GPU")
    memory = max(1, _int(labels.get(MEMORY), 1))
    mig_count, layout = _mixed_mig(labels, alloc, count, plain, model, memory)
    held_set = set(held)
    free_slots = iter([i for i in reversed(range(count)) if i not in held_set])
    taken: dict[int, OutsideUse] = {}
    for p in outside:
        for _, i in zip(range(p.gpus), free_slots, strict=False):  # range first: no slot lost
            taken[i] = p.use
    n_outside = sum(p.gpus for p in outside)
    gpus = tuple(
        GPU(
            index=i,
            uuid=f"k8s:{name}:{i}",
            model=model,
            memory_mib=memory,
            sharing=SharingMode.MIG if i >= count - mig_count else sharing,
            outside=taken.get(i),
            mig_layout=layout if i >= count - mig_count else None,
        )
        for i in range(count)
    )
    extra = {OUTSIDE: str(n_outside)} if n_outside else {}
    keep = {k: v for k, v in labels.items() if k.startswith("nvidia.com/") or k == POOL_LABEL}
    return Node(
        name,
        gpus,
        cpu_milli=cpu_milli(alloc.get("cpu")),
        memory_mib=memory_mib(alloc.get("memory")),
        labels=tuple(sorted({**keep, **extra}.items())),
        state=node_state(node),
    )


def _mixed_mig(
    labels: Mapping[str, str],
    alloc: Mapping[str, Any],
    count: int,
    plain: int,
    model: str,
    memory: int,
) -> tuple[int, str | None]:
    """(how many of the node's GPUs are cut into MIG instances, their layout) under the
    `mixed` strategy; (0, None) otherwise."""
    if labels.get(MIG_STRATEGY) != "mixed":
        return 0, None
    per_profile = {
        k[len(m.MIG_PREFIX) :]: _int(v) for k, v in alloc.items() if k.startswith(m.MIG_PREFIX)
    }
    per_profile = {k: v for k, v in per_profile.items() if v > 0}
    mig_gpus = max(0, count - plain)
    if not per_profile or not mig_gpus:
        return 0, None
    if any(v % mig_gpus for v in per_profile.values()):
        return mig_gpus, None
    layout = ",".join(f"{p}:{v // mig_gpus}" for p, v in sorted(per_profile.items()))
    try:
        layout_for_gpu(model, memory, layout)
    except ValidationError:
        return mig_gpus, None
    return mig_gpus, layout


def nodes_from(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    held: Mapping[str, set[int]] | None = None,
) -> list[Node]:
    """Every GPU node of `nodes`, with the GPUs `pods` (live pods of the cluster) take
    outside gpupool marked as taken (see the module docstring)."""
    nodes = list(nodes)
    outside = outside_pods(pods, {n["metadata"]["name"]: replicas_of(n) for n in nodes})
    out = []
    for n in nodes:
        name = n["metadata"]["name"]
        d = to_node(n, outside.get(name, []), (held or {}).get(name, ()))
        if d is not None:
            out.append(d)
    return out
