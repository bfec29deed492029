"""The webhook's decision and patches alone (pure; the HTTPS path is test_native.py's): what
is queued, what passes unchanged, what is refused and why, a dry run, and JSON patches that
keep what the object already had."""

from __future__ import annotations

import base64
import json

from gpupool.domain import Tenant, ValidationError
from gpupool.engines.common.engine import ExternalAnswer, ExternalWork
from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.webhook import Webhook
from tests.kubernetes.fakeapi_native import json_patch

NS = "gpupool-lab-a"


def _hook(refuse: str | None = None) -> tuple[Webhook, list[ExternalWork]]:
    seen: list[ExternalWork] = []

    def submit(work: ExternalWork) -> ExternalAnswer:
        seen.append(work)
        if refuse:
            raise ValidationError(refuse, "gpus")
        return ExternalAnswer("w-abc", "ann")

    return Webhook(submit, lambda: [Tenant("lab-a"), Tenant("lab-b")], "gpupool-"), seen


def _review(obj: dict, ns: str = NS, op: str = "CREATE", dry: bool = False) -> dict:
    return {
        "request": {
            "uid": "u1",
            "operation": op,
            "namespace": ns,
            "userInfo": {"username": "ann"},
            "object": obj,
            "dryRun": dry,
        }
    }


def _pod(gpus: int = 1, **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **meta},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
        },
    }


def _patched(obj: dict, answer: dict) -> dict:
    resp = answer["response"]
    assert resp["allowed"] and resp["patchType"] == "JSONPatch"
    return json_patch(obj, json.loads(base64.b64decode(resp["patch"])))


def test_a_gpu_pod_is_gated_labelled_and_submitted_as_its_user():
    hook, seen = _hook()
    pod = _pod(2, labels={"app": "x"}, annotations={"a/b": "c"})
    pod["spec"]["schedulingGates"] = [{"name": "other.io/gate"}]
    out = _patched(pod, hook.review(_review(pod)))
    assert out["spec"]["schedulingGates"] == [{"name": "other.io/gate"}, {"name": native.GATE}]
    assert out["metadata"]["labels"] == {"app": "x", native.NATIVE: "w-abc"}
    assert out["metadata"]["annotations"] == {"a/b": "c", native.SUBMITTER: "ann"}
    (work,) = seen
    assert (work.tenant, work.user, work.gpus, work.command) == (
        "lab-a",
        "ann",
        2,
        ("kubectl", "Pod", NS, "p"),
    )
    assert work.requeue_on_preemption is False  # a deleted Pod cannot come back


def test_what_passes_unchanged():
    hook, seen = _hook()
    for review in (
        _review(_pod(1), ns="kube-system"),  # no tenant's namespace
        _review(_pod(0)),  # no GPU, no queue label
        _review(_pod(1), op="UPDATE"),
        _review(_pod(1, labels={"app.kubernetes.io/managed-by": "gpupool"})),
    ):
        assert hook.review(review)["response"] == {"uid": "u1", "allowed": True}
    assert not seen


def test_a_queue_label_opts_in_work_without_gpus_and_must_name_this_tenant():
    hook, seen = _hook()
    out = hook.review(_review(_pod(0, labels={native.QUEUE: "lab-a"})))
    assert out["response"]["allowed"] and seen[0].gpus == 0
    refused = hook.review(_review(_pod(1, labels={native.QUEUE: "lab-b"})))["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    assert "names another tenant" in refused["status"]["message"]


def test_the_apis_refusal_is_the_webhooks_answer():
    hook, _ = _hook(refuse="lab-a's limit is 4 GPUs, so a request for 8 GPUs can never run")
    resp = hook.review(_review(_pod(8)))["response"]
    assert resp["allowed"] is False
    assert resp["status"] == {
        "code": 422,
        "message": "gpupool: lab-a's limit is 4 GPUs, so a request for 8 GPUs can never run",
    }


def test_a_dry_run_is_answered_and_nothing_is_queued():
    hook, seen = _hook()
    pod = _pod(1)
    out = _patched(pod, hook.review(_review(pod, dry=True)))
    assert out["spec"]["schedulingGates"] == [{"name": native.GATE}] and not seen


def test_a_job_is_suspended_whole_and_its_pods_later_pass():
    hook, seen = _hook()
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"parallelism": 3, "completions": 2, "template": _pod(2)},
    }
    out = _patched(job, hook.review(_review(job)))
    assert out["spec"]["suspend"] is True
    assert out["spec"]["template"]["metadata"]["labels"] == {native.NATIVE: "w-abc"}
    assert seen[0].gpus == 4  # min(parallelism, completions) = 2 pods x 2 GPUs
    child = {**_pod(2, labels={native.NATIVE: "w-abc"})}
    child["metadata"]["ownerReferences"] = [{"kind": "Job", "controller": True, "name": "t"}]
    assert hook.review(_review(child))["response"] == {"uid": "u1", "allowed": True}


def test_release_adds_the_node_to_every_term_of_the_objects_own_affinity():
    pod = _pod(1)
    pod["spec"]["schedulingGates"] = [{"name": native.GATE}, {"name": "x/y"}]
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        },
        "podAntiAffinity": {"x": 1},
    }
    out = json_patch(pod, native.release_patch(pod, "gpu-7"))
    assert out["spec"]["schedulingGates"] == [{"name": "x/y"}]  # another's gate stays
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    for term in terms["nodeSelectorTerms"]:
        assert term["matchExpressions"][-1] == {
            "key": "kubernetes.io/hostname",
            "operator": "In",
            "values": ["gpu-7"],
        }
    assert out["spec"]["affinity"]["podAntiAffinity"] == {"x": 1}
