"""What a notebook's pod template may ask of its node and its namespace (pure): the
Kubernetes Pod Security Standards' *restricted* level (which includes *baseline*), plus
gpupool's own rules for a pod it runs in a tenant's namespace.

`check_pod_security` refuses, each as a `TemplateError` naming the field's path
(``pod_spec.spec.…``, in Kubernetes' own notation) and what to change:

- baseline: ``hostNetwork``/``hostPID``/``hostIPC``; ``windowsOptions.hostProcess``;
  ``privileged``; ``hostPort`` other than 0; ``procMount`` other than ``Default``; seccomp
  or AppArmor ``Unconfined`` (the ``securityContext`` fields and the
  ``container.apparmor.security.beta.kubernetes.io/*`` annotations); ``seLinuxOptions``
  with a ``user``, a ``role`` or a type other than the container types; ``sysctls``
  outside the safe set (`SAFE_SYSCTLS`);
- restricted: volume kinds other than `VOLUME_KINDS` (``hostPath`` included);
  ``allowPrivilegeEscalation: true``; ``capabilities.add`` beyond ``NET_BIND_SERVICE``;
  ``runAsUser: 0``; ``runAsNonRoot: false`` where no non-zero ``runAsUser`` applies;
- gpupool's: a ``persistentVolumeClaim`` other than the owner's home (``home-<user>``, made
  by the tenancy); a ``serviceAccountToken`` in a projected volume; any reference to a
  Secret (volumes, projected sources, ``secretKeyRef``, ``envFrom.secretRef``): the
  tenant namespace's Secrets are gpupool's own (other workloads' environments and tokens),
  and the hub's Secrets are not there.

`strip` then removes, in place, what only gpupool may set: GPUs (``nvidia.com/*``, ``amd.com/*``,
``gpu.intel.com/*`` and ``resources.claims``) in every container but the one gpupool sizes,
the pod's ``resourceClaims``, ``ephemeralContainers``, ``schedulerName``, and
``priorityClassName``/``runtimeClassName`` unless an admin allowed the class. gpupool's
security context (`manifests.harden`: non-root, seccomp ``RuntimeDefault``, no privilege
escalation, every capability dropped) goes over what is left.

Not refused: a container that names no user runs as its image's ``USER`` (Jupyter's
docker-stacks images: uid 1000; a root image then fails to start, as ``runAsNonRoot``
says); group ids; dropped capabilities; ``Localhost`` seccomp and AppArmor profiles.
Zero-to-JupyterHub's default singleuser pod (``runAsUser: 1000``, ``fsGroup: 100``,
``allowPrivilegeEscalation: false``) passes; its default ``block-cloud-metadata`` init
container (privileged, root, ``NET_ADMIN``) does not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

#: What the restricted level lets a container add (every other capability must be dropped)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
#: The baseline level's safe sysctls (namespaced, isolated between pods), Kubernetes 1.30+
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
#: SELinux types the baseline level allows ("" and unset: the runtime's default)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
#: Volume kinds a notebook pod may use: restricted's list less `csi` (inline drivers reach
#: outside the namespace) and `secret` (see the module docstring)
VOLUME_KINDS = frozenset(
    {"emptyDir", "configMap", "persistentVolumeClaim", "projected", "downwardAPI", "ephemeral"}
)
GPU_PREFIXES = ("nvidia.com/", "amd.com/", "gpu.intel.com/")
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
#: Zero-to-JupyterHub's init container that blocks the cloud metadata server with iptables
Z2JH_METADATA_BLOCKER = "block-cloud-metadata"


class TemplateError(ValueError):
    """The pod template is refused; the message says what to change, `field` where."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def check_pod_security(
    spec: Mapping[str, Any],
    at: str,
    *,
    annotations: Mapping[str, Any] | None = None,
    home_claim: str | None = None,
) -> None:
    """Raise TemplateError if the pod spec `spec` (found at path `at`, with the template's
    `annotations`) asks for more than the module docstring allows. `home_claim`: the only
    PVC it may mount (None: none)."""
    for key in HOST_NAMESPACES:
        if spec.get(key):
            raise TemplateError(
                f"pod_spec may not use {key} ({at}.{key}): notebooks share no host namespace; "
                "remove it",
                f"{at}.{key}",
            )
    _check_volumes(spec.get("volumes"), f"{at}.volumes", home_claim)
    pod_sc = _context(spec.get("securityContext"), f"{at}.securityContext")
    _check_common(pod_sc, f"{at}.securityContext", "the pod", "")
    _check_sysctls(pod_sc.get("sysctls"), f"{at}.securityContext.sysctls")
    pod_user = _uid(pod_sc, f"{at}.securityContext")
    for key, value in (annotations or {}).items():
        if str(key).startswith(APPARMOR_ANNOTATION) and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            raise TemplateError(
                f"annotation {key}: {value!r} turns AppArmor off (pod_spec.metadata.annotations"
                f"[{key}]); remove it (allowed: runtime/default, localhost/<profile>)",
                f"pod_spec.metadata.annotations[{key}]",
            )
    for key in CONTAINER_LISTS:
        containers = spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise TemplateError(f"{at}.{key} must be a list of containers", f"{at}.{key}")
        for i, c in enumerate(containers):
            path = f"{at}.{key}[{i}]"
            if not isinstance(c, Mapping):
                raise TemplateError(f"{path} must be a container (an object)", path)
            _check_container(c, path, pod_sc, pod_user, at)


def _context(sc: Any, path: str) -> Mapping[str, Any]:
    if sc is None:
        return {}
    if not isinstance(sc, Mapping):
        raise TemplateError(f"{path} must be an object", path)
    return sc


def _refuse(what: str, path: str, fix: str, hint: str = "") -> TemplateError:
    return TemplateError(f"{what} ({path}); {fix}{hint}", path)


def _check_volumes(volumes: Any, at: str, home_claim: str | None) -> None:
    if volumes is None:
        return
    if not isinstance(volumes, list):
        raise TemplateError(f"{at} must be a list of volumes", at)
    for i, v in enumerate(volumes):
        path = f"{at}[{i}]"
        if not isinstance(v, Mapping):
            raise TemplateError(f"{path} must be a volume (an object)", path)
        kinds = set(v) - {"name"}
        name = v.get("name")
        if "hostPath" in kinds:
            raise TemplateError(
                f"volume {name!r}: hostPath volumes are refused ({path}.hostPath); use a "
                "persistentVolumeClaim, configMap or emptyDir",
                f"{path}.hostPath",
            )
        bad = sorted(kinds - VOLUME_KINDS)
        if bad:
            raise TemplateError(
                f"volume {name!r} is of kind {bad[0]} ({path}.{bad[0]}), which a notebook's pod "
                f"may not use; remove it from the spawner's volumes (allowed: "
                f"{', '.join(sorted(VOLUME_KINDS))}; Secrets: pass values as the workload's env)",
                f"{path}.{bad[0]}",
            )
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if "persistentVolumeClaim" in kinds and claim != home_claim:
            field = f"{path}.persistentVolumeClaim.claimName"
            home = f" ({home_claim})" if home_claim else ""
            raise TemplateError(
                f"volume {name!r} mounts the PVC {claim!r} ({field}); a notebook may mount only "
                f"its owner's home{home}, which gpupool mounts itself: remove it",
                field,
            )
        for j, source in enumerate((v.get("projected") or {}).get("sources") or []):
            for kind in ("serviceAccountToken", "secret"):
                if isinstance(source, Mapping) and kind in source:
                    raise TemplateError(
                        f"volume {name!r} projects a {kind} ({path}.projected.sources[{j}]."
                        f"{kind}); notebook pods get no service-account token and no Secret: "
                        "remove it",
                        f"{path}.projected.sources[{j}].{kind}",
                    )


def _check_sysctls(sysctls: Any, path: str) -> None:
    if sysctls is None:
        return
    if not isinstance(sysctls, list):
        raise TemplateError(f"{path} must be a list", path)
    for i, s in enumerate(sysctls):
        name = s.get("name") if isinstance(s, Mapping) else s
        if name not in SAFE_SYSCTLS:
            raise TemplateError(
                f"sysctl {name!r} is not one of the safe, namespaced ones ({path}[{i}].name); "
                f"remove it (allowed: {', '.join(sorted(SAFE_SYSCTLS))})",
                f"{path}[{i}].name",
            )


def _check_common(sc: Mapping[str, Any], scp: str, who: str, hint: str) -> None:
    """The rules a pod's and a container's security context share."""
    win = _context(sc.get("windowsOptions"), f"{scp}.windowsOptions")
    if win.get("hostProcess"):
        raise _refuse(
            f"{who} may not be a Windows HostProcess", f"{scp}.windowsOptions.hostProcess",
            "remove it", hint,
        )  # fmt: skip
    for key, allowed in (
        ("seccompProfile", ("RuntimeDefault", "Localhost")),
        ("appArmorProfile", ("RuntimeDefault", "Localhost")),
    ):
        profile = _context(sc.get(key), f"{scp}.{key}")
        if "type" in profile and profile["type"] not in allowed:
            raise _refuse(
                f"{who} may not run with {key}.type {profile['type']!r}", f"{scp}.{key}.type",
                f"use {' or '.join(allowed)}, or leave it out (gpupool sets RuntimeDefault)",
                hint,
            )  # fmt: skip
    selinux = _context(sc.get("seLinuxOptions"), f"{scp}.seLinuxOptions")
    for key in ("user", "role"):
        if selinux.get(key):
            raise _refuse(
                f"{who} may not set an SELinux {key}", f"{scp}.seLinuxOptions.{key}",
                "remove it", hint,
            )  # fmt: skip
    if selinux.get("type", "") not in SELINUX_TYPES:
        raise _refuse(
            f"{who} may not run as SELinux type {selinux['type']!r}",
            f"{scp}.seLinuxOptions.type",
            f"use one of {', '.join(sorted(t for t in SELINUX_TYPES if t))} or leave it out",
            hint,
        )


def _uid(sc: Mapping[str, Any], path: str) -> int | None:
    """The `runAsUser` of a security context (None: not set); root is refused."""
    uid = sc.get("runAsUser")
    if uid is None:
        return None
    if isinstance(uid, bool) or not isinstance(uid, int) or uid < 0:
        raise TemplateError(
            f"{path}.runAsUser must be a uid (a whole number), not {uid!r}", f"{path}.runAsUser"
        )
    if uid == 0:
        raise TemplateError(
            f"{path}.runAsUser is 0 (root): gpupool runs no notebook container as root; set a "
            "non-zero uid (Zero-to-JupyterHub: singleuser.uid, 1000 by default)",
            f"{path}.runAsUser",
        )
    return uid


def _check_container(
    c: Mapping[str, Any], path: str, pod_sc: Mapping[str, Any], pod_user: int | None, at: str
) -> None:
    hint = ""
    if c.get("name") == Z2JH_METADATA_BLOCKER:
        hint = (
            " (this is Zero-to-JupyterHub's cloud metadata blocker: set "
            "singleuser.cloudMetadata.blockWithIptables: false in its values, as "
            "deploy/helm/z2jh-values.yaml does)"
        )
    who = f"container {c.get('name')!r}"
    scp = f"{path}.securityContext"
    sc = _context(c.get("securityContext"), scp)
    for key, what in (("privileged", "be privileged"), ("allowPrivilegeEscalation", "escalate")):
        if sc.get(key):
            raise TemplateError(
                f"{who} may not {what} ({scp}.{key} is set, privileged containers are "
                f"refused); remove it or set it to false{hint}",
                f"{scp}.{key}",
            )
    caps = _context(sc.get("capabilities"), f"{scp}.capabilities")
    added = caps.get("add")
    if added is not None:
        if not isinstance(added, list) or not all(isinstance(x, str) for x in added):
            raise TemplateError(
                f"{scp}.capabilities.add must be a list of capability names",
                f"{scp}.capabilities.add",
            )
        beyond = [x for x in added if _cap(x) not in RESTRICTED_CAPABILITIES]
        if beyond:
            raise TemplateError(
                f"{who} adds capabilities beyond the Pod Security Standards' restricted level "
                f"({scp}.capabilities.add: {', '.join(beyond)}); remove them (allowed: "
                f"{', '.join(sorted(RESTRICTED_CAPABILITIES))}){hint}",
                f"{scp}.capabilities.add",
            )
    if sc.get("procMount") not in (None, "Default"):
        raise _refuse(
            f"{who} may not unmask /proc (procMount {sc['procMount']!r})", f"{scp}.procMount",
            "remove it", hint,
        )  # fmt: skip
    _check_common(sc, scp, who, hint)
    for j, port in enumerate(c.get("ports") or []):
        if isinstance(port, Mapping) and port.get("hostPort"):
            raise _refuse(
                f"{who} may not open a port on the node", f"{path}.ports[{j}].hostPort",
                "remove hostPort (the hub reaches the notebook at the pod's IP)",
            )  # fmt: skip
    _check_secret_refs(c, path)
    user = _uid(sc, scp)
    if user is None:
        user = pod_user
    if "runAsNonRoot" in sc:
        non_root, where = sc["runAsNonRoot"], f"{scp}.runAsNonRoot"
    else:
        non_root, where = pod_sc.get("runAsNonRoot"), f"{at}.securityContext.runAsNonRoot"
    if non_root is not None and not isinstance(non_root, bool):
        raise TemplateError(f"{where} must be true or false, not {non_root!r}", where)
    if non_root is False and user is None:
        raise TemplateError(
            f"{who} may run as root ({where} is false and no runAsUser is set for it): set "
            "runAsUser to a non-zero uid (Zero-to-JupyterHub: singleuser.uid) or drop "
            f"runAsNonRoot: false{hint}",
            where,
        )


def _check_secret_refs(c: Mapping[str, Any], path: str) -> None:
    fix = "pass values as the workload's env instead (gpupool keeps it in its own Secret)"
    for j, e in enumerate(c.get("env") or []):
        ref = (e.get("valueFrom") or {}) if isinstance(e, Mapping) else {}
        if isinstance(ref, Mapping) and "secretKeyRef" in ref:
            raise _refuse(
                f"env {e.get('name')!r} reads a Secret", f"{path}.env[{j}].valueFrom.secretKeyRef",
                fix,
            )  # fmt: skip
    for j, e in enumerate(c.get("envFrom") or []):
        if isinstance(e, Mapping) and "secretRef" in e:
            raise _refuse("envFrom reads a Secret", f"{path}.envFrom[{j}].secretRef", fix)


def _cap(name: str) -> str:
    """A capability's name as the standards list it (``CAP_`` prefix and case ignored)."""
    up = name.strip().upper()
    return up[4:] if up.startswith("CAP_") else up


def strip(
    spec: dict[str, Any],
    *,
    priority_classes: Collection[str] = (),
    runtime_classes: Collection[str] = (),
) -> None:
    """Strip from the checked pod spec `spec` (in place) what only gpupool may set (see the
    module docstring): GPUs leave every container (gpupool then gives the first its own);
    the allowed `priority_classes` and `runtime_classes` are kept, any other is dropped."""
    if spec.get("priorityClassName") not in priority_classes:
        for key in ("priorityClassName", "priority", "preemptionPolicy"):
            spec.pop(key, None)
    if spec.get("runtimeClassName") not in runtime_classes:
        spec.pop("runtimeClassName", None)
    for key in ("overhead", "schedulerName", "resourceClaims", "ephemeralContainers"):
        spec.pop(key, None)  # overhead is the RuntimeClass's; the rest are gpupool's to say
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            res = c.get("resources")
            if isinstance(res, dict):  # gpupool gives its GPUs to the first container itself
                res.pop("claims", None)
                for part in ("limits", "requests"):
                    q = {k: v for k, v in (res.get(part) or {}).items() if not _gpu(k)}
                    if q:
                        res[part] = q
                    else:
                        res.pop(part, None)


def _gpu(resource: str) -> bool:
    return resource.startswith(GPU_PREFIXES)
