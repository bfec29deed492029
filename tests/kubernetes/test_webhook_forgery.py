"""Who can put work in gpupool's queue through the admission webhook, end to end against
the fake API server (which calls the webhook over HTTPS). The webhook answers anyone who
reaches its port, so it creates nothing: a made-up AdmissionReview posted straight to it
queues nothing, a submitter annotation the object brings is overwritten, `kubectl annotate`
cannot re-attribute queued work nor a user release it, and an object whose mark is not the
webhook's (copied, edited, or obtained from a forged review and used later) is not queued
and says so in an Event."""

from __future__ import annotations

import copy
import ssl
import tempfile

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.native_sign import WINDOW_S
from gpupool.store import WorkloadRepo
from tests.kubernetes.fakeapi_native import json_patch
from tests.kubernetes.test_native import GFD, NS, _api, _build, _events, _intake, _kubectl, _pod


@pytest.fixture
def system(kube, clock, tmp_path):
    kube.add_node("gpu-1", 2, labels=GFD)
    system, _ = _build(kube, clock, tmp_path)
    try:
        yield system
    finally:
        system.stop()


def _rows(system) -> list:
    with system.ctx.store.read() as s:
        return WorkloadRepo(s).rows()


def _post(kube, review: dict) -> dict:
    """POST `review` to the webhook as any pod that reaches its port would."""
    with tempfile.NamedTemporaryFile(suffix=".pem") as f:
        f.write(kube.native._ca())
        f.flush()
        r = httpx.post(
            kube.native.webhook_url, json=review, verify=ssl.create_default_context(cafile=f.name)
        )
    r.raise_for_status()
    return r.json()["response"]


def _forged(name: str, user: str = "admin") -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "forged",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": user},
            "object": _pod(name, 1),
            "dryRun": False,
        },
    }


def _webhook_down(kube) -> None:
    """failurePolicy Ignore and gpupool's webhook unreachable: objects stored unchanged."""
    kube.native.failure_policy = "Ignore"
    kube.native.webhook_url = "https://127.0.0.1:9/mutate"


def test_a_forged_review_posted_to_the_webhook_queues_nothing(system, kube, clock):
    import base64
    import json

    resp = _post(kube, _forged("phantom"))
    assert resp["allowed"] is True  # a patch for the caller, worth nothing to it
    assert _rows(system) == []
    _intake(system)
    assert _rows(system) == []  # no object was stored: nothing for the watch to queue
    assert _api(system).get("/api/v1/queue").json() == []
    # the mark it got, put on a pod stored later while the webhook is down, is refused
    patch = json.loads(base64.b64decode(resp["patch"]))
    clock.advance(WINDOW_S + 1)
    _webhook_down(kube)
    core, _ = _kubectl(kube, "mallory")
    core.create_namespaced_pod(NS, json_patch(_pod("phantom", 1), patch))
    _intake(system)
    assert _rows(system) == []
    reason, message = _events(kube, "phantom")[-1]
    assert reason == "NotQueued" and "not written when the object was created" in message


def test_a_submitter_annotation_the_user_wrote_is_overwritten(system, kube):
    core, _ = _kubectl(kube, "ann")  # no gpupool user: the tenant's default submitter
    pod = _pod("mine", 1)
    pod["metadata"]["annotations"] = {native.SUBMITTER: "admin", native.SIGNATURE: "v1.1.0"}
    pod["metadata"]["labels"] = {native.NATIVE: "w-0000000000"}
    core.create_namespaced_pod(NS, pod)
    stored = kube.pod(NS, "mine")
    assert stored["metadata"]["annotations"][native.SUBMITTER] == "ann"
    wid = stored["metadata"]["labels"][native.NATIVE]
    assert wid != "w-0000000000"
    _intake(system)
    (row,) = _rows(system)
    assert (row.id, row.owner) == (wid, "default-default")  # not admin


def test_kubectl_annotate_cannot_reattribute_nor_a_user_release_queued_work(system, kube):
    core, batch = _kubectl(kube, "ann")
    core.create_namespaced_pod(NS, _pod("mine", 1))
    from tests.kubernetes.test_native import _job

    batch.create_namespaced_job(NS, _job("train", 1, 1))
    for body in (
        {"metadata": {"annotations": {native.SUBMITTER: "admin"}}},  # kubectl annotate
        {"metadata": {"annotations": {native.SIGNATURE: None}}},
        {"metadata": {"labels": {native.NATIVE: "w-1111111111"}}},
    ):
        with pytest.raises(ApiException) as e:
            core.patch_namespaced_pod("mine", NS, body)
        assert e.value.status == 403 and "cannot be added, changed or removed" in e.value.body
    with pytest.raises(ApiException) as e:  # remove the gate: run outside the queue
        core.patch_namespaced_pod("mine", NS, [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert e.value.status == 403 and "only gpupool releases it" in e.value.body
    with pytest.raises(ApiException) as e:
        batch.patch_namespaced_job("train", NS, {"spec": {"suspend": False}})
    assert e.value.status == 403 and "only gpupool releases it" in e.value.body
    core.patch_namespaced_pod("mine", NS, {"metadata": {"annotations": {"note": "ok"}}})
    _intake(system)
    assert {r.owner for r in _rows(system)} == {"default-default"}
    system.ctx.loops.get("scheduler").run_once()  # gpupool's own release passes
    assert not native.held(kube.pod(NS, "mine"))
    assert not native.held({"kind": "Job", **kube.native.job(NS, "train")})


def test_an_object_that_bypassed_the_webhook_is_not_queued_and_says_why(system, kube):
    core, _ = _kubectl(kube, "admin")
    core.create_namespaced_pod(NS, _pod("real", 1))
    real = kube.pod(NS, "real")
    _webhook_down(kube)
    copied = _pod("copy", 1)  # its marks copied from another's pod, the gate added
    copied["metadata"]["labels"] = dict(real["metadata"]["labels"])
    copied["metadata"]["annotations"] = dict(real["metadata"]["annotations"])
    copied["spec"]["schedulingGates"] = [{"name": native.GATE}]
    mallory, _ = _kubectl(kube, "mallory")
    mallory.create_namespaced_pod(NS, copied)
    edited = copy.deepcopy(copied)  # a fresh id, the submitter written by hand
    edited["metadata"]["name"] = "edited"
    edited["metadata"]["labels"][native.NATIVE] = "w-2222222222"
    mallory.create_namespaced_pod(NS, edited)
    mallory.create_namespaced_pod(NS, _pod("plain", 1))  # no gate: runs outside gpupool
    _intake(system)
    assert [(r.id, r.owner) for r in _rows(system)] == [
        (real["metadata"]["labels"][native.NATIVE], "admin")
    ]
    for name in ("copy", "edited"):
        reason, message = _events(kube, name)[-1]
        assert reason == "NotQueued" and "does not match" in message, (name, message)
        assert native.gated(kube.pod(NS, name))  # held, no GPU taken; the user may delete it
    assert _events(kube, "plain") == []
    n = len(kube.events)
    _intake(system)
    assert len(kube.events) == n  # said once, not every pass


def test_a_copied_label_hides_no_gpu_and_claims_no_workload(system, kube):
    """A pod that runs with a workload label it was not given (stored while the webhook was
    down) counts as GPUs used outside gpupool and its processes are no workload's; a queued
    Job's own pods are the Job's."""
    from tests.kubernetes.test_native import _job

    core, batch = _kubectl(kube, "admin")
    batch.create_namespaced_job(NS, _job("train", 1, 1))
    _intake(system)
    system.ctx.loops.get("scheduler").run_once()
    kube.native.job_controller(NS, "train")
    kube.set_phase(NS, "train-0", "Running", node="gpu-1")
    _webhook_down(kube)
    stolen = _pod("stolen", 1)  # the Job's label, no gate: it runs at once
    stolen["metadata"]["labels"] = dict(kube.native.job(NS, "train")["metadata"]["labels"])
    core.create_namespaced_pod(NS, stolen)
    kube.set_phase(NS, "stolen", "Running", node="gpu-1")
    (node,) = system.engines.engines[0].inventory()
    outside = [g.outside.ref for g in node.gpus if g.outside]
    assert outside == [f"pod {NS}/stolen"]  # train-0 is gpupool's: its allocation holds it
    # nor does it make the stolen pod's processes the Job's on the node
    uids = [kube.pod(NS, n)["metadata"]["uid"] for n in ("train-0", "stolen")]
    owners = system.ctx.executor.owners("pod", uids)
    wid = kube.native.job(NS, "train")["metadata"]["labels"][native.NATIVE]
    assert owners[uids[0]] == wid and not owners.get(uids[1])
