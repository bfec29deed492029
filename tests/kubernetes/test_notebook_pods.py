"""A notebook's pod from the hub's template (engines/kubernetes/notebook_pods.py, pure):
gpupool's identity, GPUs and pinning over the template; what only the hub's namespace has
dropped; dangerous templates refused; valid for Kubernetes 1.30 and 1.34."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebook_pods as nb

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
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["JUPYTERHUB_API_TOKEN"] == "secret" and env["GPUPOOL_WORKLOAD_ID"] == "W-NB1"
    assert "nodeName" not in spec and "serviceAccountName" not in spec
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert {v["name"] for v in spec["volumes"]} == {"scratch", "home"}
    assert {"name": "home", "mountPath": "/home/jovyan"} in c["volumeMounts"]
    kv.validate(pod, version, strict=True)


def test_a_template_that_mounts_the_home_keeps_its_own():
    t = _template(volumes=[{"name": "h", "persistentVolumeClaim": {"claimName": "mine"}}])
    t["spec"]["containers"][0]["volumeMounts"] = [{"name": "h", "mountPath": "/home/jovyan"}]
    pod = _pod(t)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["h"]


def test_volumes_of_the_hubs_namespace_only_are_dropped_with_their_mounts():
    t = _template(volumes=[{"name": "x", "nfs": {"server": "nfs", "path": "/"}}])
    t["spec"]["containers"][0]["volumeMounts"] = [{"name": "x", "mountPath": "/x"}]
    pod = _pod(t)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["home"]
    assert [v["name"] for v in pod["spec"]["containers"][0]["volumeMounts"]] == ["home"]


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


def test_the_endpoint_is_the_pod_ip_and_port():
    pod = _pod(_template())
    assert nb.endpoint_of(pod) is None  # not running yet: no IP
    pod["status"] = {"podIP": "10.1.2.3"}
    assert nb.endpoint_of(pod) == "http://10.1.2.3:8890"
    pod["status"] = {"podIP": "fd00::7"}
    assert nb.endpoint_of(pod) == "http://[fd00::7]:8890"
