"""A notebook's pod from the hub's template (engines/kubernetes/notebooks.py, pure):
gpupool's identity, GPUs and pinning over the template; what only the hub's namespace has
dropped; dangerous templates refused; valid for Kubernetes 1.30 and 1.34."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebooks as nb
from tests.kubernetes.fakeapi import container_env

kv = pytest.importorskip("kubernetes_validate")


def _template(**spec) -> dict:
    base = {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:2026-11-01",
                "args": ["jupyterhub-singleuser"],
                "ports": [{"name": "notebook-port", "containerPort": 8890}],
                "env": [{"name": "JUPYTERHUB_USER", "value": "ann"}],
                "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "4Gi"}},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "nodeName": "somewhere",
        "serviceAccountName": "hub",
        **spec,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-ann", "labels": {"component": "singleuser-server"}},
        "spec": base,
    }


def _pod(template: dict) -> dict:
    w = Workload("W-NB1", "lab", "ann", Request(gpus=1), kind=WorkloadKind.NOTEBOOK)
    share = Share("gpu-1", 0, "k8s:gpu-1:0", 1000, 81920, Enforcement.HARDWARE)
    return nb.notebook_pod(
        template,
        w,
        Allocation("W-NB1", "gpu-1", (share,), 0.0),
        m.PodSettings(),
        node="gpu-1",
        gpu_limits={m.GPU: "1"},
        enforcement={"k8s:gpu-1:0": Enforcement.HARDWARE},
        started_at=1.0,
        env={"JUPYTERHUB_API_TOKEN": "secret"},
    )


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_the_pod_is_gpupools_with_the_templates_container(version):
    pod = _pod(_template())
    meta, spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"]) == ("gp-w-nb1", "gpupool-lab")
    assert meta["labels"]["component"] == "singleuser-server"  # the template's kept beneath
    assert meta["labels"][m.MANAGED_BY] == "gpupool" and meta["annotations"][nb.PORT] == "8890"
    c = spec["containers"][0]
    assert c["image"] == "quay.io/jupyter/base-notebook:2026-11-01"
    assert c["resources"]["limits"] == {"memory": "4Gi", m.GPU: "1"}  # not the template's 8
    env = container_env(pod)  # the hub's token only by reference to the workload's Secret
    assert env["JUPYTERHUB_API_TOKEN"] == "secret:gp-w-nb1-env/JUPYTERHUB_API_TOKEN"
    assert env["GPUPOOL_WORKLOAD_ID"] == "W-NB1" and "HOME" not in env  # the image's HOME
    assert all(e.get("value") != "secret" for e in c["env"])
    assert "nodeName" not in spec and "serviceAccountName" not in spec
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert {v["name"] for v in spec["volumes"]} == {"scratch", "home"}
    assert {"name": "home", "mountPath": "/home/jovyan"} in c["volumeMounts"]
    kv.validate(pod, version, strict=True)


def test_a_template_that_mounts_the_home_keeps_its_own():
    t = _template(volumes=[{"name": "h", "persistentVolumeClaim": {"claimName": "home-ann"}}])
    t["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/home/jovyan"}]
    pod = _pod(t)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["h"]


def test_volume_kinds_outside_the_restricted_level_are_refused_saying_which():
    t = _template(volumes=[{"name": "x", "nfs": {"server": "nfs", "path": "/"}}])
    with pytest.raises(nb.TemplateError, match="kind nfs") as e:
        nb.check_template(t)
    assert e.value.field == "pod_spec.spec.volumes[0].nfs"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"hostPID": True}, "hostPID"),
        ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "hostPath"),
        ({"containers": []}, "containers"),
    ],
)
def test_dangerous_or_empty_templates_are_refused(change, words):
    with pytest.raises(nb.TemplateError, match=words):
        nb.check_template(_template(**change))


def test_a_privileged_container_is_refused():
    t = _template()
    t["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(nb.TemplateError, match="privileged"):
        nb.check_template(t)


def _with_security(pod_sc=None, sc=None, init_sc=None) -> dict:
    t = _template()
    spec = t["spec"]
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    if sc is not None:
        spec["containers"][0]["securityContext"] = sc
    if init_sc is not None:
        spec["initContainers"] = [{"name": "setup", "image": "busybox", "securityContext": init_sc}]
    return t


C0 = "pod_spec.spec.containers[0].securityContext"
I0 = "pod_spec.spec.initContainers[0].securityContext"


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"sc": {"capabilities": {"add": ["SYS_ADMIN"]}}}, f"{C0}.capabilities.add", "SYS_ADMIN"),
        (
            {"sc": {"capabilities": {"add": ["NET_BIND_SERVICE", "cap_net_admin"]}}},
            f"{C0}.capabilities.add",
            "cap_net_admin",
        ),
        # beyond restricted, though baseline allows it
        ({"sc": {"capabilities": {"add": ["CHOWN"]}}}, f"{C0}.capabilities.add", "CHOWN"),
        ({"init_sc": {"capabilities": {"add": ["NET_RAW"]}}}, f"{I0}.capabilities.add", "NET_RAW"),
        ({"sc": {"capabilities": {"add": "SYS_ADMIN"}}}, f"{C0}.capabilities.add", "a list"),
        ({"sc": {"runAsUser": 0}}, f"{C0}.runAsUser", "root"),
        ({"init_sc": {"runAsUser": 0}}, f"{I0}.runAsUser", "root"),
        ({"pod_sc": {"runAsUser": 0}}, "pod_spec.spec.securityContext.runAsUser", "root"),
        # the pod's root is refused even when every container names another user
        (
            {"pod_sc": {"runAsUser": 0}, "sc": {"runAsUser": 1000}},
            "pod_spec.spec.securityContext.runAsUser",
            "root",
        ),
        ({"sc": {"runAsUser": "1000"}}, f"{C0}.runAsUser", "whole number"),
        ({"sc": {"runAsUser": True}}, f"{C0}.runAsUser", "whole number"),
        ({"sc": {"runAsNonRoot": False}}, f"{C0}.runAsNonRoot", "may run as root"),
        (
            {"pod_sc": {"runAsNonRoot": False}},
            "pod_spec.spec.securityContext.runAsNonRoot",
            "may run as root",
        ),
        ({"init_sc": {"runAsNonRoot": False}}, f"{I0}.runAsNonRoot", "may run as root"),
        ({"sc": {"runAsNonRoot": "no"}}, f"{C0}.runAsNonRoot", "true or false"),
        ({"init_sc": {"privileged": True}}, f"{I0}.privileged", "privileged"),
        (
            {"init_sc": {"allowPrivilegeEscalation": True}},
            f"{I0}.allowPrivilegeEscalation",
            "escalate",
        ),
        ({"sc": {"allowPrivilegeEscalation": True}}, f"{C0}.allowPrivilegeEscalation", "escalate"),
        ({"sc": "root"}, C0, "an object"),
    ],
)
def test_root_and_added_capabilities_are_refused_with_the_fields_path(change, field, words):
    with pytest.raises(nb.TemplateError, match=words) as e:
        nb.check_template(_with_security(**change))
    assert e.value.field == field and field in str(e.value)


@pytest.mark.parametrize(
    "change",
    [
        {"sc": {"capabilities": {"add": ["NET_BIND_SERVICE", "cap_net_bind_service"]}}},
        {"sc": {"runAsNonRoot": True}},
        {"sc": {"runAsNonRoot": False, "runAsUser": 1000}},
        {"pod_sc": {"runAsNonRoot": False, "runAsUser": 1000}},  # the containers inherit it
        {"pod_sc": {"runAsNonRoot": False}, "sc": {"runAsUser": 1000}},
        {"pod_sc": {"runAsNonRoot": False}, "sc": {"runAsNonRoot": True}},
        {"init_sc": {"runAsUser": 1000, "allowPrivilegeEscalation": False}},
        {"pod_sc": {"fsGroup": 100, "runAsGroup": 100}},
    ],
)
def test_unprivileged_security_contexts_are_accepted(change):
    nb.check_template(_with_security(**change))


#: Zero-to-JupyterHub's cloud metadata blocker (singleuser.cloudMetadata.blockWithIptables,
#: on by default): an init container that runs iptables as privileged root with NET_ADMIN
Z2JH_BLOCKER = {
    "name": "block-cloud-metadata",
    "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
    "command": ["iptables", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "DROP"],
    "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}},
}


def _kubespawner_pod(**kw) -> dict:
    """The pod KubeSpawner's own code builds for Zero-to-JupyterHub's default singleuser
    settings (uid 1000, fsGroup 100, no privilege escalation), as the hub sends it."""
    import asyncio

    pytest.importorskip("kubespawner")
    from kubernetes_asyncio.client import ApiClient
    from kubespawner.objects import make_pod

    pod = make_pod(
        "jupyter-ann",
        ["jupyterhub-singleuser"],
        8888,
        "quay.io/jupyter/base-notebook:2026-11-01",
        uid=1000,
        fs_gid=100,
        **kw,
    )

    async def to_json() -> dict:
        async with ApiClient() as api:
            return api.sanitize_for_serialization(pod)

    return asyncio.run(to_json())


def test_zero_to_jupyterhubs_default_singleuser_pod_is_accepted():
    template = _kubespawner_pod()
    c = template["spec"]["containers"][0]
    assert c["securityContext"]["runAsUser"] == 1000
    assert template["spec"]["securityContext"] == {"fsGroup": 100}
    nb.check_template(template)
    pod = _pod(template)  # and gpupool builds its pod from it, user and group kept
    assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000
    assert pod["spec"]["securityContext"]["fsGroup"] == 100
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True  # restricted, by gpupool


def test_zero_to_jupyterhubs_metadata_blocker_is_refused_saying_how_to_turn_it_off():
    template = _kubespawner_pod(init_containers=[Z2JH_BLOCKER])
    with pytest.raises(nb.TemplateError, match="blockWithIptables: false") as e:
        nb.check_template(template)
    assert e.value.field == f"{I0}.privileged"


def test_the_endpoint_is_the_pod_ip_and_port():
    pod = _pod(_template())
    assert nb.endpoint_of(pod) is None  # not running yet: no IP
    pod["status"] = {"podIP": "10.1.2.3"}
    assert nb.endpoint_of(pod) == "http://10.1.2.3:8890"
    pod["status"] = {"podIP": "fd00::7"}
    assert nb.endpoint_of(pod) == "http://[fd00::7]:8890"
