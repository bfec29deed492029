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

Every pod runs under the Pod Security `restricted` profile by default (`harden`): non-root
(`runAsNonRoot`, `run_as_user`/`run_as_group`, default 1000), no privilege escalation, all
capabilities dropped, seccomp `RuntimeDefault`; a job's HOME is an emptyDir. The workload's
declared `env` is never in the pod spec: it lives in a per-workload Secret (`env_secret`,
created and deleted by the executor) that the container reads through `secretKeyRef`.
Tenant namespaces carry the matching Pod Security Admission labels (`namespace_manifest`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Allocation, Enforcement, Workload, WorkloadKind
from gpupool.domain.external_names import namespace_name

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
#: Pod Security Admission: the levels gpupool's namespaces may enforce, and the pinned
#: version of the standard (a cluster upgrade does not change what is admitted)
PSA = "pod-security.kubernetes.io/"
PSA_LEVELS = ("restricted", "baseline")
PSA_VERSION = "v1.30"
#: where a job's HOME is (an emptyDir: the image may have no home for the uid gpupool sets)
JOB_HOME = "/home/gpupool"


class ManifestError(ValueError):
    """The allocation cannot be expressed as a pod on that node; the message says why."""


@dataclass(frozen=True)
class PodSettings:
    """What every pod gets. `image`: the container image of jobs (a workload names only its
    command); `namespace_prefix`: tenant `a/b` runs in namespace `namespace_name(a/b,
    prefix)`; `pod_security`: `restricted` (default: the namespaces enforce it, pods run as
    `run_as_user`:`run_as_group`, non-root, all capabilities dropped) or `baseline` (the escape
    hatch for images that need root: pods run as the image's user with the runtime's default
    capabilities, still without privilege escalation, seccomp `RuntimeDefault`)."""

    namespace_prefix: str = field(
        default="gpupool-",
        metadata={
            "flag": "--namespace-prefix",
            "metavar": "TEXT",
            "help": "Tenant a/b runs in namespace <prefix>a-b.",
        },
    )
    image: str = field(
        default="python:3.12-slim",
        metadata={
            "flag": "--image",
            "metavar": "IMAGE",
            "help": "The container image jobs run in.",
        },
    )
    grace_s: int = 30
    pull_policy: str = "IfNotPresent"
    #: PriorityClasses and RuntimeClasses a notebook's pod template may name (others dropped)
    priority_classes: tuple[str, ...] = ()
    runtime_classes: tuple[str, ...] = ()
    pod_security: str = field(
        default="restricted",
        metadata={
            "flag": "--pod-security",
            "metavar": "LEVEL",
            "choices": PSA_LEVELS,
            "help": "The Pod Security level of tenant namespaces and pods. restricted: pods run "
            "as --run-as-user, non-root, all capabilities dropped. baseline: the escape hatch "
            "for images that must run as root (as the image's user, with the runtime's "
            "default capabilities).",
        },
    )
    run_as_user: int = field(
        default=1000,
        metadata={
            "flag": "--run-as-user",
            "metavar": "UID",
            "min": 1,
            "also": ("run_as_group",),
            "help": "The uid (and gid) of job pods under --pod-security restricted (a "
            "notebook's pod keeps the hub's non-root user).",
        },
    )
    run_as_group: int = 1000

    def __post_init__(self) -> None:
        if self.pod_security not in PSA_LEVELS:
            raise ValueError(
                f"pod_security must be one of {', '.join(PSA_LEVELS)}, not {self.pod_security!r}"
            )
        if self.run_as_user <= 0 or self.run_as_group <= 0:
            raise ValueError("run_as_user and run_as_group must be non-zero uids/gids (not root)")


def _dns(text: str, limit: int = 63) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return out[:limit].rstrip("-") or "x"


def label_value(text: str) -> str:
    """A valid label value for `text` (<= 63 chars of [A-Za-z0-9._-], alphanumeric ends)."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", out)


def namespace_for(tenant: str, prefix: str = "gpupool-") -> str:
    """The namespace of `tenant`: injective over tenant paths (`external_names`): one-segment
    lower-case names stay `<prefix><tenant>`, others get a readable form plus a hash."""
    return namespace_name(tenant, prefix)


def legacy_namespace_for(tenant: str, prefix: str = "gpupool-") -> str:
    """The name gpupool before issue 29 gave `tenant`'s namespace (`/` and every other
    character as `-`, lower case): not injective, only used to adopt namespaces on upgrade."""
    return _dns(prefix + tenant.replace("/", "-"))


def env_secret_name(workload_id: str) -> str:
    """The Secret holding a workload's declared `env`: `gp-<id>-env`."""
    return f"{pod_name(workload_id)}-env"


def env_secret(workload: Workload, namespace: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The Secret of `workload`'s declared `env` (one key per variable), labelled as
    gpupool's; the executor adds the pods as its owners once they exist."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": env_secret_name(workload.id),
            "namespace": namespace,
            "labels": {MANAGED_BY: "gpupool", WORKLOAD: label_value(workload.id)},
            "annotations": {WORKLOAD: workload.id},
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(env.items())},
    }


def env_secret_of(pod: Mapping[str, Any]) -> str | None:
    """The name of the env Secret a pod gpupool built reads (None: it reads none)."""
    meta = pod.get("metadata") or {}
    wid = (meta.get("annotations") or {}).get(WORKLOAD)
    if not wid:
        return None
    name = env_secret_name(wid)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            ref = ((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
            if ref == name:
                return name
    return None


def pod_security_labels(level: str) -> dict[str, str]:
    """The Pod Security Admission labels of a tenant namespace: `level` enforced, and
    `restricted` warned and audited, all at the pinned version."""
    out = {}
    for mode, lvl in (("enforce", level), ("warn", "restricted"), ("audit", "restricted")):
        out[f"{PSA}{mode}"] = lvl
        out[f"{PSA}{mode}-version"] = PSA_VERSION
    return out


def harden(spec: dict[str, Any], settings: PodSettings) -> None:
    """Put gpupool's security context on a pod `spec` (in place), its containers and init
    containers included. `restricted`: non-root (the pod's own non-zero `runAsUser` and
    `runAsGroup` are kept, else `settings`'), seccomp `RuntimeDefault`, and in every
    container no privilege escalation, every capability dropped (only `NET_BIND_SERVICE`
    may be added back). `baseline`: seccomp `RuntimeDefault` and no privilege escalation;
    the user is the image's."""
    restricted = settings.pod_security == "restricted"
    psc = spec.setdefault("securityContext", {})
    psc["seccompProfile"] = {"type": "RuntimeDefault"}
    if restricted:
        psc["runAsNonRoot"] = True
        if not psc.get("runAsUser"):
            psc["runAsUser"] = settings.run_as_user
        if not psc.get("runAsGroup"):
            psc["runAsGroup"] = settings.run_as_group
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            csc = c.setdefault("securityContext", {})
            csc["allowPrivilegeEscalation"] = False
            csc.pop("privileged", None)
            if (csc.get("seccompProfile") or {}).get("type") != "Localhost":
                csc["seccompProfile"] = {"type": "RuntimeDefault"}
            if restricted:
                csc["runAsNonRoot"] = True
                added = (csc.get("capabilities") or {}).get("add") or []
                caps: dict[str, Any] = {"drop": ["ALL"]}
                keep = [
                    a for a in added if str(a).upper().removeprefix("CAP_") == "NET_BIND_SERVICE"
                ]
                if keep:
                    caps["add"] = keep
                csc["capabilities"] = caps


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
    plain_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Pod manifest of `workload` (see the module docstring). `node` is None for
    CPU-only work, which kube-scheduler places anywhere. `env`: the workload's declared
    variables, read from its Secret (`env_secret`, which the caller creates); `plain_env`:
    gpupool's own (a gang's rendezvous), set in the spec."""
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
    declared = dict(env or {})
    own = {
        **(plain_env or {}),
        "GPUPOOL_WORKLOAD_ID": workload.id,
        "GPUPOOL_GPU_MILLI": str(allocation.gpu_milli if allocation else 0),
    }
    job_home = workload.kind is not WorkloadKind.NOTEBOOK and "HOME" not in declared
    if job_home:
        own["HOME"] = JOB_HOME
    secret = env_secret_name(workload.id)
    variables = [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}}
        for k in sorted(declared)
        if k not in own
    ] + [{"name": k, "value": v} for k, v in sorted(own.items())]
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
        "env": variables,
        "resources": resources,
    }
    shares = allocation.shares if allocation else ()
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": settings.grace_s,
        "containers": [container],
        "automountServiceAccountToken": False,
    }
    if job_home:
        spec["volumes"] = [{"name": "gpupool-home", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "gpupool-home", "mountPath": JOB_HOME}]
    harden(spec, settings)
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


def namespace_manifest(name: str, tenant: str, pod_security: str = "restricted") -> dict[str, Any]:
    """The namespace of a tenant: labelled so gpupool and policies can find it (the label's
    value is lossy), annotated with the exact tenant path (whose namespace it is: tenancy
    sync and the executor refuse one marked for another tenant), and with the Pod Security
    Admission labels of `pod_security`."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                MANAGED_BY: "gpupool",
                TENANT: label_value(tenant.replace("/", "-")),
                **pod_security_labels(pod_security),
            },
            "annotations": {TENANT: tenant},
        },
    }
