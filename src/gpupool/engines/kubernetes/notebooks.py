"""A notebook's pod on Kubernetes, from the template the hub's spawner sent (pure).

The KubeSpawner-based spawner (`gpupool.jupyterhub.kubespawner`) builds a Pod manifest from
KubeSpawner's own settings (image, command, ports, resources, volumes, security context,
labels) and submits it with the `notebook` workload as `pod_spec`; its environment (the
hub's JUPYTERHUB_* variables, the API token among them) goes apart, as the workload's
write-only `env`. Once admitted, the executor builds the pod here:

- gpupool owns the pod's identity: its name, the tenant's namespace, gpupool's labels and
  annotations (the template's labels and annotations are kept beneath them);
- the first container gets the GPU limits of the allocation (replacing any GPU resource the
  template asked for), the workload's environment and gpupool's variables;
- the pod is pinned to the chosen node (required node affinity), tolerates the GPU taint,
  runs with no service-account token, and mounts the user's home PVC (`home-<user>`, made
  by the tenancy) at `home_mount`, unless the template already mounts something there;
- what only makes sense in the hub's namespace is dropped: `nodeName`, the service account;
- `pod_security.strip` takes GPUs out of every other container and drops the scheduler and
  the priority and runtime classes an admin did not allow (`PodSettings`); gpupool's
  security context goes over it (`manifests.harden`: non-root, seccomp RuntimeDefault, no
  privilege escalation, all capabilities dropped).

`check_template` is what the API accepts: a Pod (or a pod `spec`) with at least one
container with an image that asks no more than `pod_security` allows (the Pod Security
Standards' restricted level; no PVC but the owner's home, no Secret, no service-account
token).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from gpupool.domain import Allocation, Enforcement, Workload
from gpupool.engines.common.executor import TemplateProblem
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.pod_security import TemplateError, check_pod_security, strip
from gpupool.engines.kubernetes.tenancy import home_claim_name

PORT = "gpupool.dev/port"
MAX_BYTES = 256 * 1024


def _spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = template.get("spec") if "spec" in template else template
    if not isinstance(spec, Mapping):
        raise TemplateError("pod_spec.spec must be an object (a Pod's spec)")
    return spec


def check_template(template: Mapping[str, Any], owner: str | None = None) -> None:
    """Raise TemplateError unless `template` is a pod gpupool may run for a notebook of
    `owner` (None: one that mounts no PVC)."""
    if len(json.dumps(template)) > MAX_BYTES:
        raise TemplateError(f"pod_spec is over {MAX_BYTES // 1024} KiB")
    spec = _spec(template)
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise TemplateError("pod_spec needs spec.containers with the notebook's container")
    at = "pod_spec.spec" if "spec" in template else "pod_spec"
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping) or not c.get("image"):
            raise TemplateError(
                "every container of pod_spec needs an image", f"{at}.containers[{i}].image"
            )
    meta = template.get("metadata") if "spec" in template else None
    check_pod_security(
        spec,
        at,
        annotations=(meta or {}).get("annotations") if isinstance(meta, Mapping) else None,
        home_claim=home_claim_name(owner) if owner else None,
    )


def template_problem(template: Mapping[str, Any], owner: str) -> TemplateProblem | None:
    """`check_template`'s refusal as the contract's `TemplateProblem` (None: accepted)."""
    try:
        check_template(template, owner)
    except TemplateError as e:
        return TemplateProblem(str(e), e.field or "pod_spec")
    return None


def port_of(template: Mapping[str, Any], default: int = 8888) -> int:
    """The notebook's port: the first container's first containerPort."""
    for c in _spec(template).get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p, Mapping) and p.get("containerPort"):
                return int(p["containerPort"])
    return default


def notebook_pod(
    template: Mapping[str, Any],
    workload: Workload,
    allocation: Allocation | None,
    settings: m.PodSettings,
    *,
    node: str | None,
    gpu_limits: Mapping[str, str],
    enforcement: Mapping[str, Enforcement],
    started_at: float,
    env: Mapping[str, str] | None = None,
    home_mount: str = "/home/jovyan",
) -> dict[str, Any]:
    """The pod of notebook `workload` built from `template` (see the module docstring)."""
    check_template(template, workload.owner)
    # gpupool's identity, pinning and GPU limits, as for a job's pod
    base = m.build_pod(
        _with_command(workload),
        allocation,
        settings,
        node=node,
        gpu_limits=gpu_limits,
        enforcement=enforcement,
        started_at=started_at,
        env=env,
    )
    spec = copy.deepcopy(dict(_spec(template)))
    strip(
        spec,
        priority_classes=settings.priority_classes,
        runtime_classes=settings.runtime_classes,
    )
    m.harden(spec, settings)
    meta = dict(template.get("metadata") or {}) if "spec" in template else {}
    base_c = base["spec"]["containers"][0]
    first = spec["containers"][0]
    names = {e["name"] for e in base_c["env"]}
    first["env"] = [
        e for e in first.get("env") or [] if isinstance(e, Mapping) and e.get("name") not in names
    ] + base_c["env"]
    res = first.setdefault("resources", {})
    for part in ("limits", "requests"):
        q = {k: v for k, v in (res.get(part) or {}).items() if not k.startswith("nvidia.com/")}
        if part == "limits":
            q.update(gpu_limits)
        if q:
            res[part] = q
        else:
            res.pop(part, None)
    for key in ("nodeName", "serviceAccountName", "serviceAccount", "nodeSelector"):
        spec.pop(key, None)
    spec["automountServiceAccountToken"] = False
    spec["restartPolicy"] = "Never"
    spec["terminationGracePeriodSeconds"] = settings.grace_s
    if "affinity" in base["spec"]:
        spec["affinity"] = base["spec"]["affinity"]
    else:
        spec.pop("affinity", None)
    tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") != m.GPU]
    spec["tolerations"] = tolerations + base["spec"].get("tolerations", [])
    if not spec["tolerations"]:
        spec.pop("tolerations")
    volumes = list(spec.get("volumes") or [])  # checked: only kinds a notebook may use
    mounts = first.setdefault("volumeMounts", [])
    if not any(x.get("mountPath") == home_mount for x in mounts):
        volumes.append(
            {
                "name": "home",
                "persistentVolumeClaim": {"claimName": home_claim_name(workload.owner)},
            }
        )
        mounts.append({"name": "home", "mountPath": home_mount})
    spec["volumes"] = volumes
    out_meta = base["metadata"]
    out_meta["labels"] = {**(meta.get("labels") or {}), **out_meta["labels"]}
    out_meta["annotations"] = {
        **(meta.get("annotations") or {}),
        **out_meta["annotations"],
        PORT: str(port_of(template)),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": spec}


def _with_command(workload: Workload) -> Workload:
    return dataclasses.replace(workload, command=workload.command or ("jupyterhub-singleuser",))


def endpoint_of(pod: Mapping[str, Any]) -> str | None:
    """ "http://<pod IP>:<port>" of a running notebook pod gpupool built (None otherwise)."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    ip = (pod.get("status") or {}).get("podIP")
    if PORT not in ann or not ip:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{ann[PORT]}"
