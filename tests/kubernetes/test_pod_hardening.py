"""What a workload's pod may do (security review F4, F5), against the fake API server:

- its declared `env` is never in the pod spec (which tenant members may read): only a
  `secretKeyRef` to a per-workload Secret, owned by the pod, deleted once the pod ended, or
  with the pod when the work is stopped; a gang's pods share one Secret;
- tenant namespaces carry the Pod Security Admission labels (`restricted`, pinned version;
  `baseline` with `pod_security`);
- job, gang and notebook pods run as non-root with every capability dropped, no privilege
  escalation and seccomp RuntimeDefault (valid for 1.30 and 1.34, `kubernetes-validate
  --strict`); a job's HOME is a writable emptyDir;
- an image that runs as root stops at `CreateContainerConfigError` under `runAsNonRoot`:
  the workload fails (not requeued) with a reason that says what to do, its pod deleted.
"""

from __future__ import annotations

import json

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.common.executor import ExecState
from gpupool.engines.kubernetes import gang as g
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebooks as nb
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.engines.kubernetes.tenancy import TenancySettings, TenantSpec, tenant_objects

kv = pytest.importorskip("kubernetes_validate")

NS = "gpupool-lab"
SECRET = "hunter2-do-not-leak"


def _w(wid: str = "w1", **kw) -> Workload:
    base = dict(tenant="lab", owner="ann", request=Request(gpus=1), command=("python", "x.py"))
    base.update(kw)
    return Workload(wid, **base)


def _alloc(wid: str = "w1", nodes: tuple[str, ...] = ("n1",)) -> Allocation:
    shares = tuple(
        Share(n, i, f"k8s:{n}:{i}", 1000, 81920, Enforcement.HARDWARE)
        for n in nodes
        for i in range(2)
    )
    return Allocation(wid, nodes[0], shares, 0.0)


def _executor(api, clock, **kw) -> KubernetesExecutor:
    return KubernetesExecutor(api, clock, allocatable=lambda n: ({m.GPU: "8"}, 1), **kw)


def _secrets(kube) -> dict:
    return kube.objects["secrets"]


def test_the_env_is_in_a_secret_never_in_the_pod_and_the_secret_goes_when_the_pod_ends(
    kube, api, clock
):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc(), env={"API_KEY": SECRET, "MODE": "fast"})
    pod = kube.pod(NS, "gp-w1")
    assert SECRET not in json.dumps(pod)  # what `kubectl get pod -o yaml` shows
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    ref = {"secretKeyRef": {"name": "gp-w1-env", "key": "API_KEY"}}
    assert env["API_KEY"] == {"name": "API_KEY", "valueFrom": ref}
    assert kube.env_of(pod)["API_KEY"] == SECRET and kube.env_of(pod)["MODE"] == "fast"
    secret = _secrets(kube)[(NS, "gp-w1-env")]
    assert secret["metadata"]["labels"][m.MANAGED_BY] == "gpupool"
    (owner,) = secret["metadata"]["ownerReferences"]  # the garbage collector's backstop
    assert owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "gp-w1",
        "uid": pod["metadata"]["uid"],
    }
    kube.set_phase(NS, "gp-w1", "Running", node="n1")
    ex.tick()
    assert (NS, "gp-w1-env") in _secrets(kube)
    kube.set_phase(NS, "gp-w1", "Succeeded", exit_code=0)
    ex.tick()
    assert ex.poll("w1").state is ExecState.SUCCEEDED
    assert (NS, "gp-w1-env") not in _secrets(kube)  # gpupool deleted it (no GC in the fake)
    assert ("DELETE", f"/api/v1/namespaces/{NS}/secrets/gp-w1-env") in kube.requests


def test_a_stopped_or_refused_workloads_secret_is_deleted(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w("w2"), _alloc("w2"), env={"API_KEY": SECRET})
    ex.stop("w2", "cancelled")
    assert (NS, "gp-w2-env") not in _secrets(kube)
    # a pod the quota refuses: its Secret is not left behind
    kube.add_quota(NS, "gpu", 0)
    from gpupool.engines.common.executor import StartError

    with pytest.raises(StartError, match="exceeded quota"):
        ex.start(_w("w3"), _alloc("w3"), env={"API_KEY": SECRET})
    assert (NS, "gp-w3-env") not in _secrets(kube)
    # no env, no Secret
    kube.quotas.clear()
    ex.start(_w("w4"), _alloc("w4"))
    assert not [k for k in _secrets(kube) if k[1].startswith("gp-w4")]


def test_a_gangs_pods_share_one_secret_deleted_when_the_gang_ends(kube, api, clock):
    ex = _executor(api, clock)
    alloc = _alloc("gw", ("a", "b"))
    ex.start(_w("gw", request=Request(gpus=4)), alloc, env={"API_KEY": SECRET})
    pods = [kube.pod(NS, g.member_name("gw", r)) for r in (0, 1)]
    for rank, pod in enumerate(pods):
        assert SECRET not in json.dumps(pod)
        env = kube.env_of(pod)
        assert env["API_KEY"] == SECRET and env["NODE_RANK"] == str(rank)
    refs = _secrets(kube)[(NS, "gp-gw-env")]["metadata"]["ownerReferences"]
    assert {r["name"] for r in refs} == {"gp-gw-0", "gp-gw-1"}
    for pod in pods:
        kube.set_phase(NS, pod["metadata"]["name"], "Succeeded", node="a", exit_code=0)
    ex.tick()
    assert (NS, "gp-gw-env") not in _secrets(kube)


def _psa(labels: dict) -> dict:
    return {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}


RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "v1.30",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "v1.30",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "v1.30",
}


def test_tenant_namespaces_enforce_pod_security_restricted(kube, api, clock):
    ns = tenant_objects(TenantSpec("lab", None, ()), "gpupool-", TenancySettings())[0]
    assert ns["kind"] == "Namespace" and ns["metadata"]["annotations"] == {m.TENANT: "lab"}
    assert _psa(ns["metadata"]["labels"]) == RESTRICTED
    for version in ("1.30.0", "1.34.0"):
        kv.validate(ns, version, strict=True)
    _executor(api, clock).start(_w(), _alloc())  # a namespace the executor makes
    assert _psa(kube.namespaces[NS]["metadata"]["labels"]) == RESTRICTED
    loose = m.namespace_manifest("gpupool-x", "x", "baseline")["metadata"]["labels"]
    assert _psa(loose)["pod-security.kubernetes.io/enforce"] == "baseline"
    assert _psa(loose)["pod-security.kubernetes.io/warn"] == "restricted"
    with pytest.raises(ValueError, match="pod_security"):
        m.PodSettings(pod_security="privileged")
    with pytest.raises(ValueError, match="non-zero"):
        m.PodSettings(run_as_user=0)


def _restricted(pod: dict, uid: int = 1000) -> None:
    """The Pod Security Standards' restricted level, as gpupool sets it."""
    spec = pod["spec"]
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == uid and psc["runAsGroup"]
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["runAsNonRoot"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in sc
    for v in spec.get("volumes", []):
        assert "hostPath" not in v


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_job_gang_and_notebook_pods_run_non_root_with_nothing_extra(version):
    settings = m.PodSettings()
    job = m.build_pod(
        _w(), _alloc(), settings, node="n1", gpu_limits={m.GPU: "2"}, enforcement={}, started_at=1.0
    )
    _restricted(job)
    c = job["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in c["env"]}["HOME"] == m.JOB_HOME
    assert {"name": "gpupool-home", "mountPath": m.JOB_HOME} in c["volumeMounts"]
    assert {"name": "gpupool-home", "emptyDir": {}} in job["spec"]["volumes"]
    _, gang_pods, _ = g.build_gang(
        _w("gw"), _alloc("gw", ("a", "b")), settings, lambda p: ({m.GPU: "2"}, None), 1.0
    )
    template = {
        "spec": {
            "securityContext": {"runAsUser": 1000, "fsGroup": 100},
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook:2026-11-01",
                    "securityContext": {"allowPrivilegeEscalation": False},
                }
            ],
        }
    }
    notebook = nb.notebook_pod(
        template,
        _w("nb", kind=WorkloadKind.NOTEBOOK, command=()),
        _alloc("nb"),
        settings,
        node="n1",
        gpu_limits={m.GPU: "1"},
        enforcement={},
        started_at=1.0,
        env={"JUPYTERHUB_API_TOKEN": SECRET},
    )
    assert SECRET not in json.dumps(notebook)
    for pod in [job, *gang_pods, notebook]:
        _restricted(pod)
        kv.validate(pod, version, strict=True)
    own = m.build_pod(
        _w(),
        None,
        m.PodSettings(run_as_user=4242, run_as_group=4242),
        node=None,
        gpu_limits={},
        enforcement={},
        started_at=1.0,
    )
    _restricted(own, 4242)


def test_baseline_is_the_escape_hatch_for_images_that_need_root():
    pod = m.build_pod(
        _w(),
        None,
        m.PodSettings(pod_security="baseline"),
        node=None,
        gpu_limits={},
        enforcement={},
        started_at=1.0,
    )
    psc, sc = pod["spec"]["securityContext"], pod["spec"]["containers"][0]["securityContext"]
    assert "runAsNonRoot" not in psc and "runAsUser" not in psc  # the image's user
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and "capabilities" not in sc
    kv.validate(pod, "1.34.0", strict=True)


ROOT_IMAGE = (
    'container has runAsNonRoot and image will run as root (pod: "gp-w1_gpupool-lab(uid)", '
    'container: "work")'
)


def test_an_image_that_needs_root_fails_the_workload_saying_what_to_do(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(
        NS, "gp-w1", "Pending", node="n1", reason="CreateContainerConfigError", message=ROOT_IMAGE
    )
    ex.tick()
    st = ex.poll("w1")
    assert st.state is ExecState.FAILED  # failed, not requeued: it would fail everywhere
    assert "numeric non-root USER" in st.message and "--pod-security baseline" in st.message
    assert "image will run as root" in st.message
    assert (NS, "gp-w1") not in kube.pods  # deleted: it holds the GPUs while it waits
    ex.tick()
    assert ex.poll("w1").state is ExecState.FAILED
    # other config errors (a missing Secret) stay a wait, ended by the pending timeout
    ex.start(_w("w2"), _alloc("w2"))
    kube.set_phase(
        NS,
        "gp-w2",
        "Pending",
        node="n1",
        reason="CreateContainerConfigError",
        message='secret "x" not found',
    )
    ex.tick()
    assert ex.poll("w2").state is ExecState.STARTING
