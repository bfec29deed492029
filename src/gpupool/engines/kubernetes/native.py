"""Kubernetes-native work (pure): a Pod or `batch/v1` Job made with `kubectl apply` in a
tenant's namespace that gpupool queues (docs/kubernetes.md, "Submitting with kubectl").

- **Which objects**: a Pod or Job created in a tenant namespace that asks for
  `nvidia.com/gpu` or carries the label `gpupool.dev/queue: <tenant path>` (`candidate`).
  Not gpupool's own pods (`app.kubernetes.io/managed-by: gpupool`), and not the pods of a
  Job gpupool already queued (they carry its `NATIVE` label and a Job owner: the Job was
  admitted whole).
- **What the webhook changes** (`hold_patch`, a JSON patch): a Pod gets the scheduling gate
  `gpupool.dev/admission`; a Job gets `spec.suspend: true`; both get the label
  `gpupool.dev/native-workload: <workload id>` (a fresh id; a Job's pod template too) and
  the annotations `gpupool.dev/submitter: <Kubernetes user>` and `gpupool.dev/signature`
  (native_sign.py), always overwritten. The webhook queues nothing: the workload is made
  when the watch sees the stored object (native_intake.py).
- **Admission** (`release_patch`): one request that pins the placement (a required node
  affinity on `kubernetes.io/hostname`, added to every existing term) and removes the gate
  or sets `suspend: false`. Kubernetes allows both in one update of a gated Pod or a
  suspended Job that never ran, so no state exists in which one is done and not the other.
- A Job with parallelism p > 1 asks for p x its pod's GPUs on one node: admitted whole.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.engines.kubernetes import manifests as m

GATE = "gpupool.dev/admission"
QUEUE = "gpupool.dev/queue"
NATIVE = "gpupool.dev/native-workload"
SUBMITTER = "gpupool.dev/submitter"
SIGNATURE = "gpupool.dev/signature"
#: label selector of every object gpupool queued from the Kubernetes API
NATIVE_SELECTOR = NATIVE
PRODUCT = "nvidia.com/gpu.product"
#: the first word of a native workload's command: ("kubectl", kind, namespace, name)
COMMAND = "kubectl"
_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # the store's (Crockford's base32)


class Refusal(ValueError):
    """The object can never be queued as it is; the message says what to change."""


@dataclass(frozen=True)
class Ask:
    """What an object asks of gpupool."""

    kind: str  # "Pod" or "Job"
    namespace: str
    name: str
    gpus: int
    gpu_model: str | None
    pods: int  # the pods admitted together (a Job's parallelism)


def _quantity(raw: Any) -> int:
    try:
        return int(str(raw))
    except ValueError:
        raise Refusal(f"{m.GPU} must be a whole number of GPUs, not {raw!r}") from None


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """The GPUs one pod of `spec` takes: its containers' sum, or its largest init
    container's if more (as kube-scheduler counts)."""

    def of(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        raw = (res.get("limits") or {}).get(m.GPU) or (res.get("requests") or {}).get(m.GPU)
        return _quantity(raw) if raw is not None else 0

    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def pod_spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if obj.get("kind") == "Job":
        return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return obj.get("spec") or {}


def parallelism(job: Mapping[str, Any]) -> int:
    spec = job.get("spec") or {}
    raw = spec.get("parallelism")
    p = int(raw) if raw is not None else 1
    completions = spec.get("completions")
    return max(1, min(p, int(completions)) if completions is not None else p)


def is_own(obj: Mapping[str, Any]) -> bool:
    """gpupool's own pod, or a pod of a Job gpupool queued (admitted with it)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(m.MANAGED_BY) == "gpupool":
        return True
    owners = meta.get("ownerReferences") or []
    return bool(labels.get(NATIVE)) and any(
        o.get("kind") == "Job" and o.get("controller") for o in owners
    )


def candidate(obj: Mapping[str, Any]) -> bool:
    """Whether gpupool queues this Pod or Job (it asks for GPUs or names a queue)."""
    if obj.get("kind") not in ("Pod", "Job") or is_own(obj):
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return QUEUE in labels or pod_gpus(pod_spec_of(obj)) > 0


def ask_of(obj: Mapping[str, Any], namespace: str, tenant: str) -> Ask:
    """What `obj` asks for; Refusal when its queue label names another tenant."""
    meta = obj.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE)
    if queue is not None and queue.replace(".", "/") not in (tenant, tenant.replace("/", ".")):
        raise Refusal(
            f"the label {QUEUE}={queue} names another tenant than this namespace's "
            f"({tenant}); submit in that tenant's namespace, or label it {QUEUE}="
            f"{tenant.replace('/', '.')}"
        )
    spec = pod_spec_of(obj)
    per_pod = pod_gpus(spec)
    pods = parallelism(obj) if obj.get("kind") == "Job" else 1
    model = (spec.get("nodeSelector") or {}).get(PRODUCT)
    name = str(meta.get("name") or meta.get("generateName") or "")
    return Ask(str(obj["kind"]), namespace, name, per_pod * pods, model, pods)


def command_of(ask: Ask) -> tuple[str, ...]:
    return (COMMAND, ask.kind, ask.namespace, ask.name)


def native_ref(command: tuple[str, ...]) -> tuple[str, str] | None:
    """(kind, namespace) of a native workload's command; None for any other workload."""
    if len(command) == 4 and command[0] == COMMAND and command[1] in ("Pod", "Job"):
        return command[1], command[2]
    return None


def _ptr(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def new_workload_id() -> str:
    """A fresh workload id (the store's format: `w-` and 10 base32 characters)."""
    return "w-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


def hold_patch(
    obj: Mapping[str, Any], workload_id: str, submitter: str, signature: str
) -> list[dict[str, Any]]:
    """The webhook's JSON patch: gate or suspend, label and annotate (see the docstring);
    an `add` of a key the object already has replaces its value (RFC 6902)."""
    meta = obj.get("metadata") or {}
    ops: list[dict[str, Any]] = []

    def put(path: str, container: Mapping[str, Any] | None, key: str, value: Any) -> None:
        if container is None:
            ops.append({"op": "add", "path": path, "value": {key: value}})
        else:
            ops.append({"op": "add", "path": f"{path}/{_ptr(key)}", "value": value})

    put("/metadata/labels", meta.get("labels"), NATIVE, workload_id)
    notes = meta.get("annotations")
    put("/metadata/annotations", notes, SUBMITTER, submitter)
    put("/metadata/annotations", {} if notes is None else notes, SIGNATURE, signature)
    if obj.get("kind") == "Job":
        ops.append({"op": "add", "path": "/spec/suspend", "value": True})
        tmeta = ((obj.get("spec") or {}).get("template") or {}).get("metadata")
        if tmeta is None:
            ops.append({"op": "add", "path": "/spec/template/metadata", "value": {"labels": {}}})
            tmeta = {"labels": {}}
        put("/spec/template/metadata/labels", tmeta.get("labels"), NATIVE, workload_id)
        return ops
    gates = (obj.get("spec") or {}).get("schedulingGates")
    gate = {"name": GATE}
    if gates is None:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [gate]})
    elif gate not in gates:
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": gate})
    return ops


def pinned_affinity(spec: Mapping[str, Any], node: str) -> dict[str, Any]:
    """`spec`'s affinity with a required `kubernetes.io/hostname In [node]` added to every
    node selector term (a term of its own when there is none)."""
    affinity = copy.deepcopy(dict(spec.get("affinity") or {}))
    na = affinity.setdefault("nodeAffinity", {})
    req = na.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    ours = {"key": m.HOSTNAME, "operator": "In", "values": [node]}
    terms = req.get("nodeSelectorTerms") or [{}]
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") != m.HOSTNAME]
        term["matchExpressions"] = [*exprs, ours]
    req["nodeSelectorTerms"] = terms
    return affinity


def gated(pod: Mapping[str, Any]) -> bool:
    return {"name": GATE} in ((pod.get("spec") or {}).get("schedulingGates") or [])


def release_patch(obj: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """One JSON patch that pins `obj` to `node` and lets it run (see the docstring)."""
    if obj.get("kind") == "Job":
        spec = pod_spec_of(obj)
        return [
            {
                "op": "add",
                "path": "/spec/template/spec/affinity",
                "value": pinned_affinity(spec, node),
            },
            {"op": "replace", "path": "/spec/suspend", "value": False},
        ]
    spec = obj.get("spec") or {}
    rest = [g for g in spec.get("schedulingGates") or [] if g != {"name": GATE}]
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/affinity", "value": pinned_affinity(spec, node)}
    ]
    if rest:
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": rest})
    else:
        ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    return ops


def suspended(job: Mapping[str, Any]) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def held(obj: Mapping[str, Any]) -> bool:
    """Still waiting for gpupool: a gated Pod or a suspended Job."""
    return suspended(obj) if obj.get("kind") == "Job" else gated(obj)
