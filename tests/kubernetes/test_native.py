"""Kubernetes-native work end to end against the fake API server: `kubectl apply` of a Pod
or Job in a tenant namespace goes through gpupool's webhook (served over HTTPS, called by
the fake before it stores the object), is queued when the watch sees the stored object
(`_intake`: a reconciler pass), waits gated or suspended with Events saying why, is
admitted by gpupool's scheduler (node affinity written, gate removed or Job resumed in one
patch; the fake's kube-scheduler binds), and is stopped by deleting or suspending it.
Work that can never run is refused at the webhook with the API's own reason, and a crash
between gpupool's decision and the release is undone on restart."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient

from gpupool.engines.kubernetes import native, webhook_tls
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.webhook import WebhookSettings
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import WorkloadRepo
from gpupool.system import SystemSettings, build_system
from tests.kubernetes import fakeapi_native as native_fake

GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
NS = "gpupool-default"
HOST = "kubernetes.io/hostname"


def _build(kube, clock, tmp_path, watch: bool = False, launch_grace_s: float = 60.0):
    hook = WebhookSettings(host="127.0.0.1", service="127.0.0.1")
    engine = KubernetesEngine(KubeOptions(watch=watch, webhook=hook), api_client=kube.client())
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    s = SystemSettings(
        server=Settings(database_url=db, start_loops=False, launch_grace_s=launch_grace_s),
        admin="admin",
        data_dir=tmp_path / "data",
        jupyterhub=False,
    )
    system = build_system(s, engine, clock=clock)
    kube.now = clock.now  # the API server's clock (creationTimestamp) agrees with gpupool's
    # the chart's MutatingWebhookConfiguration, its caBundle empty: gpupool sets it
    kube.native.register_webhook("https://127.0.0.1:0/mutate", b"")
    port = engine.serve_webhook()
    kube.native.webhook_url = f"https://127.0.0.1:{port}/mutate"
    return system, engine


@pytest.fixture
def system(kube, clock, tmp_path):
    kube.add_node("gpu-1", 2, labels=GFD)
    system, _ = _build(kube, clock, tmp_path)
    try:
        yield system
    finally:
        system.stop()


def _kubectl(kube, user: str = "admin"):
    """The official client as `kubectl --as <user>` would talk."""
    from kubernetes import client

    c = kube.client()
    c.set_default_header("Impersonate-User", user)
    return client.CoreV1Api(c), client.BatchV1Api(c)


def _pod(name: str, gpus: int, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            **spec,
        },
    }


def _job(name: str, gpus: int, parallelism: int) -> dict:
    pod = _pod("x", gpus)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def _intake(system) -> None:
    """A reconciler pass: what the watch shows held and signed is queued."""
    system.ctx.loops.get("reconciler").run_once()


def _workload(system, wid: str):
    with system.ctx.store.read() as s:
        return WorkloadRepo(s).get(wid)


def _events(kube, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in kube.events
        if e["involvedObject"]["name"] == name and e.get("source", {}).get("component") == "gpupool"
    ]


def _api(system):
    token = issue_token(system.ctx, "admin", "test", None).token
    return TestClient(system.app, headers={"Authorization": f"Bearer {token}"})


def test_gpupool_keeps_its_own_webhooks_ca_bundle(system, kube):
    cfg = kube.native.webhook_configs["gpupool"]
    ca = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])
    assert ca.startswith(b"-----BEGIN CERTIFICATE-----")
    patches = [p for m, p in kube.requests if m == "PATCH" and "mutatingwebhook" in p]
    assert patches == [
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpupool"
    ]


def test_a_kubectl_pod_waits_gated_then_runs_where_gpupool_placed_it(system, kube, clock):
    core, _ = _kubectl(kube)
    core.create_namespaced_pod(NS, _pod("vector-add", 1))
    pod = kube.pod(NS, "vector-add")
    assert pod["spec"]["schedulingGates"] == [{"name": native.GATE}]
    wid = pod["metadata"]["labels"][native.NATIVE]
    assert pod["metadata"]["annotations"][native.SUBMITTER] == "admin"
    with system.ctx.store.read() as s:
        assert WorkloadRepo(s).rows() == []  # the webhook queues nothing
    _intake(system)  # the watch saw the stored, gated pod: queued
    w = _workload(system, wid)
    assert (w.state, w.owner, w.tenant) == ("pending", "admin", "default")
    assert w.command == ("kubectl", "Pod", NS, "vector-add")
    with pytest.raises(AssertionError, match="never binds a gated pod"):
        kube.set_phase(NS, "vector-add", "Running", node="gpu-1")

    ctx = system.ctx
    # the same pass wrote an Event saying why it waits
    assert _events(kube, "vector-add")[-1] == (
        "Queued",
        "waiting: waiting for the next scheduling cycle",
    )
    ctx.loops.get("scheduler").run_once()
    pod = kube.pod(NS, "vector-add")
    assert "schedulingGates" not in pod["spec"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["gpu-1"]}]}
    ]
    assert "nodeName" not in pod["spec"]  # kube-scheduler binds, never gpupool
    assert ("Admitted", "admitted by gpupool on node gpu-1 for default") in _events(
        kube, "vector-add"
    )
    kube.set_phase(NS, "vector-add", "Running", node="gpu-1")
    ctx.loops.get("reconciler").run_once()
    assert _workload(system, wid).state == "running"
    kube.set_phase(NS, "vector-add", "Succeeded", exit_code=0)
    ctx.loops.get("reconciler").run_once()
    assert _workload(system, wid).state == "succeeded"


def test_a_waiting_pod_gets_the_queue_reason_as_an_event(system, kube, clock):
    core, _ = _kubectl(kube)
    core.create_namespaced_pod(NS, _pod("big", 2))
    ctx = system.ctx
    _intake(system)
    ctx.loops.get("scheduler").run_once()
    core.create_namespaced_pod(NS, _pod("small", 1))
    _intake(system)
    ctx.loops.get("scheduler").run_once()
    assert "schedulingGates" not in kube.pod(NS, "big")["spec"]
    assert kube.pod(NS, "small")["spec"]["schedulingGates"] == [{"name": native.GATE}]
    wid = kube.pod(NS, "small")["metadata"]["labels"][native.NATIVE]
    clock.advance(60)
    ctx.loops.get("reconciler").run_once()
    queue = _api(system).get("/api/v1/queue").json()
    (entry,) = [e for e in queue if e["workload"]["id"] == wid]
    reason, message = _events(kube, "small")[-1]
    assert reason == "Queued"
    assert message == f"waiting: 1st in line for default; {entry['reason']}"
    assert "GPU" in message


def test_a_job_is_suspended_then_admitted_whole_and_its_pods_pass(system, kube, clock):
    _, batch = _kubectl(kube, "ann")  # no gpupool user: the tenant's default submitter
    batch.create_namespaced_job(NS, _job("train", 1, 2))
    job = kube.native.job(NS, "train")
    assert job["spec"]["suspend"] is True
    wid = job["metadata"]["labels"][native.NATIVE]
    assert job["spec"]["template"]["metadata"]["labels"][native.NATIVE] == wid
    _intake(system)
    w = _workload(system, wid)
    assert (w.owner, w.request.gpus) == ("default-default", 2)  # 2 pods x 1 GPU, whole
    assert kube.native.job_controller(NS, "train") == []  # suspended: no pods
    system.ctx.loops.get("scheduler").run_once()
    job = kube.native.job(NS, "train")
    assert job["spec"]["suspend"] is False
    aff = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    expr = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert expr["matchExpressions"] == [{"key": HOST, "operator": "In", "values": ["gpu-1"]}]
    pods = kube.native.job_controller(NS, "train")  # through the webhook, not gated again
    assert pods == ["train-0", "train-1"]
    assert all("schedulingGates" not in kube.pod(NS, p)["spec"] for p in pods)
    creates = [r["request"] for r in kube.native.reviews if r["request"]["operation"] == "CREATE"]
    assert {r["userInfo"]["username"] for r in creates} == {"ann", native_fake.JOB_CONTROLLER}
    system.ctx.loops.get("reconciler").run_once()
    assert _workload(system, wid).state == "running"
    kube.native.finish_job(NS, "train")
    system.ctx.loops.get("reconciler").run_once()
    assert _workload(system, wid).state == "succeeded"


def test_stopping_suspends_a_job_again_and_deletes_a_pod_with_an_event(system, kube, clock):
    core, batch = _kubectl(kube)
    batch.create_namespaced_job(NS, _job("train", 1, 1))
    core.create_namespaced_pod(NS, _pod("solo", 1))
    ctx = system.ctx
    _intake(system)
    ctx.loops.get("scheduler").run_once()
    kube.native.job_controller(NS, "train")
    kube.set_phase(NS, "solo", "Running", node="gpu-1")
    ctx.loops.get("reconciler").run_once()
    api = _api(system)
    job_wid = kube.native.job(NS, "train")["metadata"]["labels"][native.NATIVE]
    pod_wid = kube.pod(NS, "solo")["metadata"]["labels"][native.NATIVE]
    for wid in (job_wid, pod_wid):
        assert api.delete(f"/api/v1/workloads/{wid}").status_code == 200
    assert kube.native.job(NS, "train")["spec"]["suspend"] is True
    assert kube.native.job_controller(NS, "train") == []  # Kubernetes deletes its pods
    assert ("solo" in {n for _, n in kube.pods}) is False or kube.pod(NS, "solo")["metadata"].get(
        "deletionTimestamp"
    )
    reason, message = _events(kube, "train")[-1]
    assert reason == "Preempted" and message.startswith("suspended again by gpupool:")
    reason, message = _events(kube, "solo")[-1]
    assert reason == "Preempted" and message.startswith("deleted by gpupool:")
    ctx.loops.get("reconciler").run_once()
    assert _workload(system, job_wid).state == "cancelled"


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (_pod("too-big", 3), "can never run"),
        (_pod("no-such-gpu", 1, nodeSelector={native.PRODUCT: "NVIDIA-B200"}), "gpu"),
        (_job("too-wide", 1, 4), "can never run"),
    ],
)
def test_work_that_can_never_run_is_refused_at_the_webhook(system, kube, obj, why):
    from kubernetes.client.exceptions import ApiException

    core, batch = _kubectl(kube)
    with pytest.raises(ApiException) as e:
        if obj["kind"] == "Pod":
            core.create_namespaced_pod(NS, obj)
        else:
            batch.create_namespaced_job(NS, obj)
    assert e.value.status == 422
    assert "denied the request: gpupool:" in e.value.body and why in e.value.body.lower()
    assert not kube.pods and not kube.native.jobs  # nothing stored
    with system.ctx.store.read() as s:
        assert WorkloadRepo(s).rows() == []  # nothing queued


def test_pods_outside_tenant_namespaces_and_without_gpus_pass_unchanged(system, kube):
    kube.add_namespace("web")
    core, _ = _kubectl(kube)
    core.create_namespaced_pod("web", _pod("elsewhere", 1))
    core.create_namespaced_pod(NS, _pod("cpu-only", 0))
    assert "schedulingGates" not in kube.pod("web", "elsewhere")["spec"]
    assert "schedulingGates" not in kube.pod(NS, "cpu-only")["spec"]


def test_a_crash_between_decision_and_release_is_undone_on_restart(kube, clock, tmp_path):
    """gpupool dies right after it stored its decision (the workload admitted) and before
    its release patch: the pod stays gated. The restarted server requeues the workload once
    its launch grace is over and releases the pod on the next admission, with one affinity."""
    kube.add_node("gpu-1", 2, labels=GFD)
    kube.add_node("gpu-2", 2, labels=GFD)
    system, engine = _build(kube, clock, tmp_path)
    core, _ = _kubectl(kube)
    core.create_namespaced_pod(NS, _pod("vector-add", 1))
    wid = kube.pod(NS, "vector-add")["metadata"]["labels"][native.NATIVE]
    _intake(system)

    class Killed(BaseException):
        """kill -9: nothing after this point runs (no rollback, no cleanup)."""

    def die(*a, **kw):
        raise Killed

    engine.executor.native.patch = die
    with pytest.raises(Killed):
        system.ctx.loops.get("scheduler").run_once()
    assert _workload(system, wid).state == "admitted"
    # as if an older release had written the affinity and died before the gate went
    pod = kube.pod(NS, "vector-add")
    stale = native.pinned_affinity(pod["spec"], "gpu-2")
    kube.native.kube.pods[(NS, "vector-add")]["spec"]["affinity"] = stale
    assert native.gated(kube.pod(NS, "vector-add"))
    system.stop()

    system, engine = _build(kube, clock, tmp_path, launch_grace_s=5)  # GPUPOOL_LAUNCH_GRACE_S
    try:
        ctx = system.ctx
        ctx.loops.get("reconciler").run_once()
        assert _workload(system, wid).state == "admitted"  # within the launch grace
        clock.advance(4)
        ctx.loops.get("reconciler").run_once()
        assert _workload(system, wid).state == "admitted"
        clock.advance(2)
        ctx.loops.get("reconciler").run_once()
        assert _workload(system, wid).state == "pending"
        ctx.loops.get("scheduler").run_once()
        pod = kube.pod(NS, "vector-add")
        assert not native.gated(pod)
        req = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        (term,) = req["nodeSelectorTerms"]
        (expr,) = term["matchExpressions"]
        assert expr["key"] == HOST and len(expr["values"]) == 1
        assert _workload(system, wid).state == "starting"
    finally:
        system.stop()


def test_the_webhook_certificate_is_renewed_before_it_expires(tmp_path):
    first = webhook_tls.ensure(tmp_path, ["gpupool-webhook.gpupool.svc"], 1_780_000_000.0)
    assert first.made
    again = webhook_tls.ensure(tmp_path, ["gpupool-webhook.gpupool.svc"], 1_780_000_000.0)
    assert not again.made and again.ca_pem == first.ca_pem
    late = first.not_after - webhook_tls.RENEW_BEFORE_S + 1
    renewed = webhook_tls.ensure(tmp_path, ["gpupool-webhook.gpupool.svc"], late)
    assert renewed.made and renewed.not_after > first.not_after


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_every_object_on_the_path_is_valid_kubernetes(system, kube, version):
    """The gated Pod, the suspended Job, both once released, and gpupool's Events, as the
    fake stored them, against the official schemas (kubernetes-validate --strict)."""
    kv = pytest.importorskip("kubernetes_validate")
    core, batch = _kubectl(kube)
    pod = _pod("vector-add", 1)
    pod["spec"]["affinity"] = {  # the user's own affinity: gpupool adds to its terms
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    kube.nodes["gpu-1"]["metadata"]["labels"]["zone"] = "a"
    core.create_namespaced_pod(NS, pod)
    batch.create_namespaced_job(NS, _job("train", 1, 1))
    _intake(system)

    def strip(obj: dict) -> dict:  # what the fake adds that a client never sends
        return {k: v for k, v in obj.items() if k != "status"}

    held = [strip(kube.pod(NS, "vector-add")), strip(kube.native.job(NS, "train"))]
    system.ctx.loops.get("scheduler").run_once()
    system.ctx.loops.get("reconciler").run_once()
    released = [strip(kube.pod(NS, "vector-add")), strip(kube.native.job(NS, "train"))]
    (term,) = released[0]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [e["key"] for e in term["matchExpressions"]] == ["zone", HOST]
    events = [e for e in kube.events if e.get("source", {}).get("component") == "gpupool"]
    assert events
    for obj in [*held, *released, *events]:
        kv.validate(obj, version, strict=True)


def test_an_emptied_ca_bundle_is_restored_and_a_due_certificate_renewed(system, kube, clock):
    from gpupool.engines.kubernetes.engine import CERT_CHECK_S

    engine = system.engines.engines[0]
    cfg = kube.native.webhook_configs["gpupool"]
    first = cfg["webhooks"][0]["clientConfig"]["caBundle"]
    cfg["webhooks"][0]["clientConfig"]["caBundle"] = ""  # helm upgrade re-applied it
    assert not engine.check_webhook_cert()  # not due yet: nothing read
    clock.advance(CERT_CHECK_S)
    assert not engine.check_webhook_cert()  # the same certificate, its CA written back
    assert (
        kube.native.webhook_configs["gpupool"]["webhooks"][0]["clientConfig"]["caBundle"] == first
    )
    clock.advance(webhook_tls.VALID_S - webhook_tls.RENEW_BEFORE_S)
    assert engine.check_webhook_cert()  # renewed: a new CA, the server restarted with it
    now = kube.native.webhook_configs["gpupool"]["webhooks"][0]["clientConfig"]["caBundle"]
    assert now != first
    # (the fake cannot call it now: the manual clock made it valid a year from today)
    assert engine.webhook_server is not None and engine.webhook_server.port


def test_a_pod_deleted_while_it_waits_withdraws_its_workload(system, kube, clock):
    core, _ = _kubectl(kube)
    core.create_namespaced_pod(NS, _pod("first", 2))
    ctx = system.ctx
    _intake(system)
    ctx.loops.get("scheduler").run_once()  # it takes both GPUs: the next one waits
    core.create_namespaced_pod(NS, _pod("changed-mind", 1))
    clock.advance(60)
    _intake(system)
    ctx.loops.get("scheduler").run_once()
    wid = kube.pod(NS, "changed-mind")["metadata"]["labels"][native.NATIVE]
    ctx.loops.get("reconciler").run_once()  # seen waiting
    assert _workload(system, wid).state == "pending"
    core.delete_namespaced_pod("changed-mind", NS)
    clock.advance(60)
    ctx.loops.get("reconciler").run_once()
    w = _workload(system, wid)
    assert w.state == "cancelled"
    assert w.reason == f"Pod/{NS}/changed-mind was deleted before gpupool admitted it"


def test_the_agents_pods_of_queued_work_are_attributed_to_it(system, kube):
    core, batch = _kubectl(kube)
    core.create_namespaced_pod(NS, _pod("solo", 1))
    batch.create_namespaced_job(NS, _job("train", 1, 1))
    _intake(system)
    system.ctx.loops.get("scheduler").run_once()
    kube.native.job_controller(NS, "train")
    solo, child = kube.pod(NS, "solo"), kube.pod(NS, "train-0")
    uids = [solo["metadata"]["uid"], child["metadata"]["uid"], "someone-else"]
    owners = system.ctx.executor.owners("pod", uids)
    assert owners[uids[0]] == solo["metadata"]["labels"][native.NATIVE]
    assert owners[uids[1]] == kube.native.job(NS, "train")["metadata"]["labels"][native.NATIVE]
    assert not owners.get("someone-else")
