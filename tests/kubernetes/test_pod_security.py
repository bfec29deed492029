"""The hub's pod_spec against the risky fields of the security review (F8), one row each:
refused with the field's path (the API's 422 names it), or neutralised in the pod gpupool
builds. The first 22 rows are the review's; the 7 it found held come after them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebooks as nb

kv = pytest.importorskip("kubernetes_validate")

S = "pod_spec.spec"
C0 = f"{S}.containers[0]"


def _template() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-ann", "annotations": {}},
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook:2026-11-01",
                    "ports": [{"containerPort": 8888}],
                    "securityContext": {"runAsUser": 1000},
                    "resources": {"limits": {"memory": "4Gi"}},
                },
                {"name": "sidecar", "image": "busybox", "resources": {}},
            ],
            "initContainers": [{"name": "setup", "image": "busybox", "resources": {}}],
            "volumes": [],
        },
    }


def _pod(template: dict, settings: m.PodSettings | None = None) -> dict:
    w = Workload("W-NB1", "lab", "ann", Request(gpus=1), kind=WorkloadKind.NOTEBOOK)
    share = Share("gpu-1", 0, "k8s:gpu-1:0", 1000, 81920, Enforcement.HARDWARE)
    return nb.notebook_pod(
        template,
        w,
        Allocation("W-NB1", "gpu-1", (share,), 0.0),
        settings or m.PodSettings(),
        node="gpu-1",
        gpu_limits={m.GPU: "1"},
        enforcement={"k8s:gpu-1:0": Enforcement.HARDWARE},
        started_at=1.0,
        env={},
    )


Change = Callable[[dict], None]


def _set(path: str, value: Any) -> Change:
    """A change that sets `value` at the dotted `path` under the template (list indexes as
    numbers), making objects on the way."""

    def change(t: dict) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        node: Any = t
        for k in keys[:-1]:
            node = node[k] if isinstance(k, int) else node.setdefault(k, {})
        node[keys[-1]] = value

    return change


def _volume(volume: dict, mount: bool = True) -> Change:
    def change(t: dict) -> None:
        t["spec"]["volumes"].append(volume)
        if mount:
            t["spec"]["containers"][0]["volumeMounts"] = [
                {"name": volume["name"], "mountPath": "/data"}
            ]

    return change


def _annotate(key: str, value: str) -> Change:
    def change(t: dict) -> None:
        t["metadata"]["annotations"][key] = value

    return change


#: (what, change, the refused field's path)
REFUSED: list[tuple[str, Change, str]] = [
    ("hostPort", _set("spec.containers.0.ports.0.hostPort", 8888), f"{C0}.ports[0].hostPort"),
    (
        "seccomp Unconfined (pod)",
        _set("spec.securityContext.seccompProfile", {"type": "Unconfined"}),
        f"{S}.securityContext.seccompProfile.type",
    ),
    (
        "seccomp Unconfined (container)",
        _set("spec.containers.1.securityContext.seccompProfile", {"type": "Unconfined"}),
        f"{S}.containers[1].securityContext.seccompProfile.type",
    ),
    (
        "AppArmor unconfined (field)",
        _set("spec.containers.0.securityContext.appArmorProfile", {"type": "Unconfined"}),
        f"{C0}.securityContext.appArmorProfile.type",
    ),
    (
        "AppArmor unconfined (annotation)",
        _annotate("container.apparmor.security.beta.kubernetes.io/notebook", "unconfined"),
        "pod_spec.metadata.annotations[container.apparmor.security.beta.kubernetes.io/notebook]",
    ),
    (
        "procMount Unmasked",
        _set("spec.initContainers.0.securityContext.procMount", "Unmasked"),
        f"{S}.initContainers[0].securityContext.procMount",
    ),
    (
        "unsafe sysctl",
        _set("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "65536"}]),
        f"{S}.securityContext.sysctls[0].name",
    ),
    (
        "SELinux type spc_t",
        _set("spec.securityContext.seLinuxOptions", {"type": "spc_t"}),
        f"{S}.securityContext.seLinuxOptions.type",
    ),
    (
        "SELinux user",
        _set("spec.containers.0.securityContext.seLinuxOptions", {"user": "system_u"}),
        f"{C0}.securityContext.seLinuxOptions.user",
    ),
    (
        "Windows hostProcess",
        _set("spec.securityContext.windowsOptions", {"hostProcess": True}),
        f"{S}.securityContext.windowsOptions.hostProcess",
    ),
    (
        "another user's PVC",
        _volume({"name": "ben", "persistentVolumeClaim": {"claimName": "home-ben"}}),
        f"{S}.volumes[0].persistentVolumeClaim.claimName",
    ),
    (
        "a shared PVC",
        _volume({"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}),
        f"{S}.volumes[0].persistentVolumeClaim.claimName",
    ),
    (
        "service-account token projection",
        _volume(
            {
                "name": "tok",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            }
        ),
        f"{S}.volumes[0].projected.sources[0].serviceAccountToken",
    ),
    (
        "a Secret volume (other workloads' env and tokens)",
        _volume({"name": "s", "secret": {"secretName": "gp-w-other-env"}}),
        f"{S}.volumes[0].secret",
    ),
    (
        "a Secret in env",
        _set(
            "spec.containers.1.env",
            [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "gp-x", "key": "k"}}}],
        ),
        f"{S}.containers[1].env[0].valueFrom.secretKeyRef",
    ),
    ("an nfs volume", _volume({"name": "n", "nfs": {"server": "s", "path": "/"}}), "nfs"),
    (
        "an inline CSI volume",
        _volume({"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io"}}),
        f"{S}.volumes[0].csi",
    ),
    (
        "a capability baseline allows but restricted does not",
        _set("spec.containers.0.securityContext.capabilities", {"add": ["CHOWN"]}),
        f"{C0}.securityContext.capabilities.add",
    ),
    (
        "allowPrivilegeEscalation true",
        _set("spec.containers.1.securityContext.allowPrivilegeEscalation", True),
        f"{S}.containers[1].securityContext.allowPrivilegeEscalation",
    ),
    # the seven the review found held
    ("hostNetwork", _set("spec.hostNetwork", True), f"{S}.hostNetwork"),
    ("hostPID", _set("spec.hostPID", True), f"{S}.hostPID"),
    ("hostIPC", _set("spec.hostIPC", True), f"{S}.hostIPC"),
    (
        "hostPath",
        _volume({"name": "h", "hostPath": {"path": "/"}}),
        f"{S}.volumes[0].hostPath",
    ),
    (
        "privileged",
        _set("spec.initContainers.0.securityContext.privileged", True),
        f"{S}.initContainers[0].securityContext.privileged",
    ),
    (
        "SYS_ADMIN",
        _set("spec.containers.0.securityContext.capabilities", {"add": ["SYS_ADMIN"]}),
        f"{C0}.securityContext.capabilities.add",
    ),
    ("root", _set("spec.containers.1.securityContext.runAsUser", 0), "runAsUser"),
]


@pytest.mark.parametrize(("what", "change", "field"), REFUSED, ids=[r[0] for r in REFUSED])
def test_risky_fields_are_refused_naming_the_field(what, change, field):
    t = _template()
    nb.check_template(t, "ann")  # the template itself passes
    change(t)
    with pytest.raises(nb.TemplateError) as e:
        nb.check_template(t, "ann")
    assert e.value.field is not None and field in e.value.field, (e.value.field, str(e.value))
    assert e.value.field in str(e.value)  # the message names it too
    with pytest.raises(nb.TemplateError):  # and the executor builds no pod from it
        _pod(t)


def _gpu_everywhere(t: dict) -> None:
    spec = t["spec"]
    spec["containers"][1]["resources"] = {
        "limits": {"nvidia.com/gpu": "8", "memory": "1Gi"},
        "requests": {"nvidia.com/mig-1g.10gb": "1"},
        "claims": [{"name": "gpus"}],
    }
    spec["initContainers"][0]["resources"] = {"limits": {"amd.com/gpu": "1"}}
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "all-gpus"}]


def _no_gpu_but_gpupools(pod: dict) -> None:
    spec = pod["spec"]
    first, side = spec["containers"]
    assert first["resources"]["limits"] == {"memory": "4Gi", m.GPU: "1"}
    assert "claims" not in first["resources"]
    assert side["resources"] == {"limits": {"memory": "1Gi"}}
    assert spec["initContainers"][0]["resources"] == {}
    assert "resourceClaims" not in spec


def _restricted(pod: dict) -> None:
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"] + spec["initContainers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]


#: (what, change, what the built pod shows)
NEUTRALISED: list[tuple[str, Change, Callable[[dict], None]]] = [
    ("GPUs in a 2nd container, an init container and resourceClaims", _gpu_everywhere,
     _no_gpu_but_gpupools),
    ("priorityClassName", _set("spec.priorityClassName", "system-node-critical"),
     lambda p: assert_absent(p, "priorityClassName")),
    ("priority", _set("spec.priority", 2000001000), lambda p: assert_absent(p, "priority")),
    ("runtimeClassName", _set("spec.runtimeClassName", "nvidia-privileged"),
     lambda p: assert_absent(p, "runtimeClassName")),
    ("schedulerName", _set("spec.schedulerName", "my-scheduler"),
     lambda p: assert_absent(p, "schedulerName")),
    ("no security context at all", lambda t: None, _restricted),
    ("serviceAccountName", _set("spec.serviceAccountName", "hub"),
     lambda p: assert_absent(p, "serviceAccountName")),
    ("automountServiceAccountToken", _set("spec.automountServiceAccountToken", True),
     lambda p: p["spec"]["automountServiceAccountToken"] is False or pytest.fail("token")),
]  # fmt: skip


def assert_absent(pod: dict, key: str) -> None:
    assert key not in pod["spec"], pod["spec"].get(key)


@pytest.mark.parametrize(("what", "change", "shows"), NEUTRALISED, ids=[r[0] for r in NEUTRALISED])
def test_risky_fields_gpupool_overrides_are_neutralised(what, change, shows):
    t = _template()
    change(t)
    nb.check_template(t, "ann")
    pod = _pod(t)
    shows(pod)
    _restricted(pod)
    kv.validate(pod, "1.30.0", strict=True)


def test_allowed_classes_are_kept():
    t = _template()
    t["spec"].update(priorityClassName="notebooks", runtimeClassName="nvidia")
    settings = m.PodSettings(priority_classes=("notebooks",), runtime_classes=("nvidia",))
    spec = _pod(copy.deepcopy(t), settings)["spec"]
    assert (spec["priorityClassName"], spec["runtimeClassName"]) == ("notebooks", "nvidia")
    spec = _pod(t)["spec"]
    assert "priorityClassName" not in spec and "runtimeClassName" not in spec


@pytest.mark.parametrize(
    "change",
    [
        _set("spec.securityContext.seccompProfile", {"type": "RuntimeDefault"}),
        _set(
            "spec.containers.0.securityContext.seccompProfile",
            {"type": "Localhost", "localhostProfile": "nb.json"},
        ),
        _set("spec.containers.0.securityContext.appArmorProfile", {"type": "RuntimeDefault"}),
        _set("spec.securityContext.seLinuxOptions", {"type": "container_t", "level": "s0:c1"}),
        _set(
            "spec.securityContext.sysctls",
            [{"name": "net.ipv4.ping_group_range", "value": "0 2147483647"}],
        ),  # fmt: skip
        _set("spec.containers.0.securityContext.procMount", "Default"),
        _set("spec.containers.0.ports.0.hostPort", 0),
        _volume({"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}),
        _volume({"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}]}}),
        _set("spec.containers.0.securityContext.capabilities", {"add": ["NET_BIND_SERVICE"]}),
    ],
)
def test_what_restricted_allows_passes(change):
    t = _template()
    change(t)
    nb.check_template(t, "ann")
    kv.validate(_pod(t), "1.34.0", strict=True)


def test_without_an_owner_no_pvc_passes():
    t = _template()
    _volume({"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}})(t)
    with pytest.raises(nb.TemplateError, match="PVC"):
        nb.check_template(t)
