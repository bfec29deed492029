"""The webhook's decision and patches alone (pure; the HTTPS path is test_native.py's): what
is held and marked, what passes unchanged, what is refused and why, a dry run, JSON patches
that keep what the object already had, the signed mark, and the UPDATE guard."""

from __future__ import annotations

import base64
import json

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Tenant, ValidationError
from gpupool.engines.common.engine import ExternalWork
from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.manifests import MANAGED_BY
from gpupool.engines.kubernetes.native_sign import Signer, Unsigned
from gpupool.engines.kubernetes.webhook import Webhook
from tests.kubernetes.fakeapi_native import iso, json_patch

NS = "gpupool-lab-a"
T0 = 1_780_000_000.0
SIGNER = Signer(b"k" * 32)


def _hook(refuse: str | None = None) -> tuple[Webhook, list[ExternalWork]]:
    seen: list[ExternalWork] = []

    def check(work: ExternalWork) -> None:
        seen.append(work)
        if refuse:
            raise ValidationError(refuse, "gpus")

    tenants = lambda: [Tenant("lab-a"), Tenant("lab-b")]  # noqa: E731
    return Webhook(check, tenants, "gpupool-", SIGNER, ManualClock(T0)), seen


def _stored(obj: dict, at: float = T0) -> dict:
    """`obj` as the API server stores it: namespace and creationTimestamp its own."""
    meta = {**obj["metadata"], "namespace": NS, "creationTimestamp": iso(at)}
    return {**obj, "metadata": meta}


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


def test_a_gpu_pod_is_gated_marked_and_checked_as_its_user():
    hook, seen = _hook()
    pod = _pod(2, labels={"app": "x"}, annotations={"a/b": "c"})
    pod["spec"]["schedulingGates"] = [{"name": "other.io/gate"}]
    out = _patched(pod, hook.review(_review(pod)))
    assert out["spec"]["schedulingGates"] == [{"name": "other.io/gate"}, {"name": native.GATE}]
    wid = out["metadata"]["labels"][native.NATIVE]
    assert out["metadata"]["labels"] == {"app": "x", native.NATIVE: wid}
    notes = out["metadata"]["annotations"]
    assert notes == {"a/b": "c", native.SUBMITTER: "ann", native.SIGNATURE: notes[native.SIGNATURE]}
    assert SIGNER.verify(_stored(out)).submitter == "ann"
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


def test_a_dry_run_is_checked_and_answered_like_any_review():
    hook, seen = _hook()
    pod = _pod(1)
    out = _patched(pod, hook.review(_review(pod, dry=True)))
    assert out["spec"]["schedulingGates"] == [{"name": native.GATE}] and len(seen) == 1
    refused, _ = _hook(refuse="no node has that GPU")
    assert refused.review(_review(pod, dry=True))["response"]["allowed"] is False


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
    wid = out["metadata"]["labels"][native.NATIVE]
    assert out["spec"]["template"]["metadata"]["labels"] == {native.NATIVE: wid}
    assert seen[0].gpus == 4  # min(parallelism, completions) = 2 pods x 2 GPUs
    child = {**_pod(2, labels={native.NATIVE: wid})}
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


def test_a_submitter_the_object_brought_is_overwritten_and_every_review_gets_a_new_id():
    hook, _ = _hook()
    forged = {native.SUBMITTER: "boss", native.SIGNATURE: "v1.1.00"}
    pod = _pod(1, labels={native.NATIVE: "w-victim000"}, annotations=forged)
    first = _patched(pod, hook.review(_review(pod)))
    again = _patched(pod, hook.review(_review(pod)))
    assert first["metadata"]["annotations"][native.SUBMITTER] == "ann"
    ids = {o["metadata"]["labels"][native.NATIVE] for o in (first, again)}
    assert len(ids) == 2 and "w-victim000" not in ids
    assert SIGNER.verify(_stored(first)).submitter == "ann"


def test_a_mark_verifies_only_on_the_object_and_at_the_time_it_was_written_for():
    hook, _ = _hook()
    out = _patched(_pod(1), hook.review(_review(_pod(1))))
    assert SIGNER.verify(_stored(out, T0 + 60)).submitter == "ann"  # clock skew, timeout
    edited = _stored(out)
    edited["metadata"]["annotations"] = {
        **edited["metadata"]["annotations"],
        native.SUBMITTER: "boss",
    }
    renamed = {**_stored(out), "metadata": {**_stored(out)["metadata"], "name": "other"}}
    elsewhere = {**_stored(out), "metadata": {**_stored(out)["metadata"], "namespace": "x"}}
    for obj, why in [
        (edited, "does not match"),
        (renamed, "does not match"),  # copied onto another object
        (elsewhere, "does not match"),
        (_stored(out, T0 + 3600), "not written when the object was created"),  # kept for later
        (_stored(_pod(1, labels={native.NATIVE: "w-x"})), "no signature"),
    ]:
        with pytest.raises(Unsigned, match=why):
            SIGNER.verify(obj)
    with pytest.raises(Unsigned, match="does not match"):  # another server's key
        Signer(b"o" * 32).verify(_stored(out))


def test_a_generated_name_is_signed_as_its_prefix():
    hook, _ = _hook()
    pod = _pod(1)
    pod["metadata"] = {"generateName": "train-"}
    out = _patched(pod, hook.review(_review(pod)))
    out["metadata"]["name"] = "train-x7k2p"  # named by the API server after admission
    assert SIGNER.verify(_stored(out)).submitter == "ann"
    out["metadata"]["name"] = "other-x7k2p"
    with pytest.raises(Unsigned):
        SIGNER.verify(_stored(out))


def _update(old: dict, new: dict, user: str = "ann") -> dict:
    review = _review(new, op="UPDATE")
    review["request"]["oldObject"] = old
    review["request"]["userInfo"] = {"username": user}
    return review


def test_an_update_cannot_change_a_queued_objects_marks_or_release_it():
    hook, _ = _hook()
    held = _stored(_patched(_pod(1), hook.review(_review(_pod(1)))))
    notes = held["metadata"]["annotations"]

    def changed(**meta) -> dict:
        return {**held, "metadata": {**held["metadata"], **meta}}

    for new in (
        changed(annotations={**notes, native.SUBMITTER: "boss"}),  # kubectl annotate
        changed(annotations={k: v for k, v in notes.items() if k != native.SIGNATURE}),
        changed(labels={native.NATIVE: "w-other00000"}),
    ):
        resp = hook.review(_update(held, new))["response"]
        assert resp["allowed"] is False and resp["status"]["code"] == 403
        assert "cannot be added, changed or removed" in resp["status"]["message"]
    ungated = {**held, "spec": {**held["spec"], "schedulingGates": []}}
    resp = hook.review(_update(held, ungated))["response"]
    assert resp["allowed"] is False and "only gpupool releases it" in resp["status"]["message"]
    with hook.releasing("Pod", NS, "p"):  # gpupool's own release patch
        assert hook.review(_update(held, ungated))["response"]["allowed"] is True
    other = changed(annotations={**notes, "note": "mine"})  # anything else may change
    assert hook.review(_update(held, other))["response"]["allowed"] is True
    # marks cannot be added to an object the webhook never marked either
    plain = _stored(_pod(1))
    resp = hook.review(_update(plain, {**plain, "metadata": held["metadata"]}))["response"]
    assert resp["allowed"] is False


def test_a_queued_object_cannot_be_relabelled_as_gpupools_own_to_release_it():
    """What makes gpupool take an object as its own (`native.is_own`: the label
    `app.kubernetes.io/managed-by: gpupool`, a controlling Job) cannot be added to a queued
    object: the guard would then let its user ungate it, and gpupool would no longer count
    its GPUs as anyone's."""
    hook, _ = _hook()
    held = _stored(_patched(_pod(1), hook.review(_review(_pod(1)))))
    labels = held["metadata"]["labels"]
    own = {**held, "metadata": {**held["metadata"], "labels": {**labels, MANAGED_BY: "gpupool"}}}
    resp = hook.review(_update(held, own))["response"]
    assert resp["allowed"] is False and MANAGED_BY in resp["status"]["message"]
    # nor given a Job owner (the guard is not sent a Job's pods, and gpupool takes them as
    # their Job's)
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": True}
    owned = {**held, "metadata": {**held["metadata"], "ownerReferences": [job]}}
    resp = hook.review(_update(held, owned))["response"]
    assert resp["allowed"] is False and "owner" in resp["status"]["message"]
    # gpupool's release still passes
    ungated = {**held, "spec": {**held["spec"], "schedulingGates": []}}
    with hook.releasing("Pod", NS, "p"):
        assert hook.review(_update(held, ungated))["response"]["allowed"] is True


def test_a_queued_job_cannot_be_resumed_or_widened_by_its_user():
    hook, _ = _hook()
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"parallelism": 1, "template": _pod(1)},
    }
    held = _stored(_patched(job, hook.review(_review(job))))
    resumed = {**held, "spec": {**held["spec"], "suspend": False}}
    assert hook.review(_update(held, resumed))["response"]["allowed"] is False
    wider = {**held, "spec": {**held["spec"], "parallelism": 8}}
    resp = hook.review(_update(held, wider))["response"]
    assert resp["allowed"] is False and "parallelism" in resp["status"]["message"]
    # nor its pods' GPUs (a suspended Job's template resources may become mutable)
    template = _pod(8)
    template["metadata"] = held["spec"]["template"]["metadata"]
    bigger = {**held, "spec": {**held["spec"], "template": template}}
    resp = hook.review(_update(held, bigger))["response"]
    assert resp["allowed"] is False and "GPUs" in resp["status"]["message"]
    with hook.releasing("Job", NS, "train"):
        assert hook.review(_update(held, resumed))["response"]["allowed"] is True


def test_the_intake_queues_a_signed_object_once_and_retries_a_refusal_later():
    from gpupool.engines.common.engine import ExternalAnswer
    from gpupool.engines.kubernetes.native_intake import Intake

    hook, _ = _hook()
    held = _stored(_patched(_pod(1), hook.review(_review(_pod(1)))))
    held["metadata"]["uid"] = "u-1"
    copied = {**held, "metadata": {**held["metadata"], "name": "copy", "uid": "u-2"}}
    answers: list[Exception | None] = [ValidationError("lab-a's limit is 0 GPUs", "gpus")] * 2
    calls: list[ExternalWork] = []
    warned: list[tuple[str, str, str]] = []

    def submit(work: ExternalWork) -> ExternalAnswer:
        calls.append(work)
        refusal = answers.pop(0) if answers else None
        if refusal is not None:
            raise refusal
        return ExternalAnswer(str(work.workload_id), "ann")

    clock = ManualClock(T0)
    tenants = lambda: [Tenant("lab-a")]  # noqa: E731
    intake = Intake(
        lambda: submit,
        tenants,
        "gpupool-",
        SIGNER,
        lambda o, r, m: warned.append((o["metadata"]["name"], r, m)),
        clock,
    )
    wid = held["metadata"]["labels"][native.NATIVE]
    assert intake.run([held, copied]) == []
    assert [(n, r) for n, r, _ in warned] == [("p", "Refused"), ("copy", "NotQueued")]
    assert calls[0].workload_id == wid and calls[0].user == "ann"
    assert intake.run([held, copied]) == [] and len(calls) == 1  # not again at once
    clock.advance(intake.retry_s)
    assert intake.run([held, copied]) == [] and len(calls) == 2
    assert len(warned) == 2  # the same reason, the same objects: said once
    clock.advance(intake.retry_s)
    assert intake.run([held, copied]) == [wid]
    assert intake.run([held, copied]) == [] and len(calls) == 3  # queued: not again
