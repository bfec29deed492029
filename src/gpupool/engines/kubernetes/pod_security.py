"""What a notebook's pod template may ask of its node (pure): the Kubernetes Pod Security
Standards' *baseline* level for host access and capabilities, and the *restricted* level's
rules on running as root.

Refused, each as a `TemplateError` naming the field's path (``pod_spec.spec.…``, in
Kubernetes' own notation) and what to change:

- ``spec.hostNetwork``, ``spec.hostPID``, ``spec.hostIPC`` set (host namespaces);
- a ``hostPath`` volume;
- in every container (``containers``, ``initContainers`` and ``ephemeralContainers``), in
  its ``securityContext``: ``privileged`` or ``allowPrivilegeEscalation`` set;
  ``capabilities.add`` naming a capability outside `BASELINE_CAPABILITIES`; ``runAsUser: 0``;
  ``runAsNonRoot: false`` unless the container's user (its ``runAsUser``, else the pod's) is
  a non-zero uid;
- ``spec.securityContext.runAsUser: 0`` (the pod's default user).

Not refused: a container that names no user runs as its image's ``USER`` (Jupyter's
docker-stacks images: uid 1000); group ids (``fsGroup``, ``runAsGroup``,
``supplementalGroups``); dropped capabilities. Zero-to-JupyterHub's default singleuser pod
(``runAsUser: 1000``, ``fsGroup: 100``, ``allowPrivilegeEscalation: false``) passes; its
default ``block-cloud-metadata`` init container (privileged, root, ``NET_ADMIN``) does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: What the baseline level lets a container add: Docker's default set, nothing beyond it.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
#: Zero-to-JupyterHub's init container that blocks the cloud metadata server with iptables
Z2JH_METADATA_BLOCKER = "block-cloud-metadata"


class TemplateError(ValueError):
    """The pod template is refused; the message says what to change, `field` where."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def check_pod_security(spec: Mapping[str, Any], at: str) -> None:
    """Raise TemplateError if the pod spec `spec` (found at path `at`) asks for more than the
    module docstring allows."""
    for key in HOST_NAMESPACES:
        if spec.get(key):
            raise TemplateError(
                f"pod_spec may not use {key} ({at}.{key}): notebooks share no host namespace; "
                "remove it",
                f"{at}.{key}",
            )
    for i, v in enumerate(spec.get("volumes") or []):
        if isinstance(v, Mapping) and "hostPath" in v:
            raise TemplateError(
                f"volume {v.get('name')!r}: hostPath volumes are refused ({at}.volumes[{i}]"
                ".hostPath); use a persistentVolumeClaim, configMap, secret or emptyDir",
                f"{at}.volumes[{i}].hostPath",
            )
    pod_sc = _context(spec.get("securityContext"), f"{at}.securityContext")
    pod_user = _uid(pod_sc, f"{at}.securityContext")
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
    scp = f"{path}.securityContext"
    sc = _context(c.get("securityContext"), scp)
    for key, what in (("privileged", "be privileged"), ("allowPrivilegeEscalation", "escalate")):
        if sc.get(key):
            raise TemplateError(
                f"container {c.get('name')!r} may not {what} ({scp}.{key} is set, privileged "
                f"containers are refused); remove it or set it to false{hint}",
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
        beyond = [x for x in added if _cap(x) not in BASELINE_CAPABILITIES]
        if beyond:
            raise TemplateError(
                f"container {c.get('name')!r} adds capabilities beyond the Pod Security "
                f"Standards' baseline ({scp}.capabilities.add: {', '.join(beyond)}); remove "
                f"them (allowed: {', '.join(sorted(BASELINE_CAPABILITIES))}){hint}",
                f"{scp}.capabilities.add",
            )
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
            f"container {c.get('name')!r} may run as root ({where} is false and no runAsUser "
            "is set for it): set runAsUser to a non-zero uid (Zero-to-JupyterHub: "
            f"singleuser.uid) or drop runAsNonRoot: false{hint}",
            where,
        )


def _cap(name: str) -> str:
    """A capability's name as the baseline lists it (``CAP_`` prefix and case ignored)."""
    up = name.strip().upper()
    return up[4:] if up.startswith("CAP_") else up
