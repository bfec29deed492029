"""The fake API server's part for Kubernetes-native work (see fakeapi.py): what a real
kube-apiserver, job controller and kube-scheduler do on the path of a `kubectl apply`d Pod
or Job through gpupool's webhook.

- **Admission**: with `register_webhook(url, ca_pem)` every Pod and Job create and update
  (`update`: a PATCH, with its `oldObject`) is sent to the webhook first, over HTTPS
  verified against `ca_pem` (as kube-apiserver does with the caBundle), as an
  `admission.k8s.io/v1` AdmissionReview with the requesting user (`Impersonate-User`
  header, as `kubectl --as`, else `kubernetes-admin`); its JSON patch is applied before
  storing, a denial answered with the webhook's code and message (`admission webhook "..."
  denied the request: ...`). `failure_policy` decides what an unreachable webhook does
  (Fail: 500 InternalError, Ignore: stored unchanged). The API server, not the client,
  writes `creationTimestamp` (`FakeKube.now`).
- **Scheduling gates**: `FakeKube.set_phase(..., node=...)` refuses to bind a gated pod, and
  an update may remove gates, never add one (as Kubernetes).
- **Jobs** (batch/v1): create/get/list/watch/patch (JSON and merge)/delete; `job_controller`
  does the job controller's part: an unsuspended Job gets its `parallelism` pods (created
  through admission as `system:serviceaccount:kube-system:job-controller`, owned by the
  Job), a suspended one loses them; `finish_job` marks it Complete or Failed.
- **Events**: POST /api/v1/namespaces/{ns}/events is stored in `FakeKube.events`.
- **MutatingWebhookConfigurations**: get/patch (the caBundle gpupool keeps).
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import tempfile
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.kubernetes.fakeapi_wire import (
    iso,
    json_patch,
    match_fields,
    match_labels,
    merge,
    status,
)

if TYPE_CHECKING:
    from tests.kubernetes.fakeapi import FakeKube

__all__ = ["JOB_CONTROLLER", "NativeFake", "iso", "json_patch"]

JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


class NativeFake:
    """State and controls of the native path (see the module docstring)."""

    def __init__(self, kube: FakeKube):
        self.kube = kube
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.webhook_configs: dict[str, dict[str, Any]] = {}
        self.webhook_url: str | None = None
        self.failure_policy = "Fail"
        self.reviews: list[dict[str, Any]] = []

    # -- controls ------------------------------------------------------------------------------
    def register_webhook(self, url: str, ca_pem: bytes, name: str = "gpupool") -> None:
        """Call the webhook at `url` (…/mutate) on every Pod and Job create."""
        self.webhook_url = url
        self.webhook_configs[name] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "resourceVersion": self.kube.rv()},
            "webhooks": [
                {
                    "name": "admission.gpupool.dev",
                    "clientConfig": {
                        "url": url,
                        "caBundle": base64.b64encode(ca_pem).decode(),
                    },
                    "failurePolicy": self.failure_policy,
                }
            ],
        }

    def _ca(self, name: str = "gpupool") -> bytes:
        return base64.b64decode(
            self.webhook_configs[name]["webhooks"][0]["clientConfig"]["caBundle"]
        )

    def update(
        self, kind: str, ns: str, old: dict[str, Any], patch: Any, user: str
    ) -> tuple[dict[str, Any], Response | None]:
        """`old` with `patch` (a JSON patch, or a merge patch) applied and admitted as an
        UPDATE: (the object to store, None) or (old, the refusal)."""
        try:
            new = (
                json_patch(old, patch)
                if isinstance(patch, list)
                else merge(copy.deepcopy(old), patch)
            )
        except (KeyError, IndexError, ValueError) as e:
            return old, status(422, "Invalid", f"the patch does not apply: {e}")
        if kind == "Pod":
            was = (old.get("spec") or {}).get("schedulingGates") or []
            now = (new.get("spec") or {}).get("schedulingGates") or []
            if any(g not in was for g in now):
                return old, status(
                    422, "Invalid", "spec.schedulingGates: Forbidden: only deletion is allowed"
                )
        admitted, refused = self.admit(kind, ns, new, user, old=old)
        return (old, refused) if refused is not None else (admitted or new, None)

    def admit(
        self,
        kind: str,
        ns: str,
        obj: dict[str, Any],
        user: str,
        old: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any] | None, Response | None]:
        """(the object to store, None) or (None, the refusal); `old`: an UPDATE of it."""
        if self.webhook_url is None:
            return obj, None
        group = {"Pod": ("", "v1", "pods"), "Job": ("batch", "v1", "jobs")}[kind]
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": group[0], "version": group[1], "kind": kind},
                "resource": {"group": group[0], "version": group[1], "resource": group[2]},
                "namespace": ns,
                "name": (obj.get("metadata") or {}).get("name", ""),
                "operation": "CREATE" if old is None else "UPDATE",
                "userInfo": {"username": user, "groups": ["system:authenticated"]},
                "object": obj,
                "oldObject": old,
                "dryRun": False,
            },
        }
        self.reviews.append(review)
        with tempfile.NamedTemporaryFile(suffix=".pem") as f:
            f.write(self._ca())
            f.flush()
            ctx = ssl.create_default_context(cafile=f.name)
            try:
                r = httpx.post(self.webhook_url, json=review, verify=ctx, timeout=10)
                r.raise_for_status()
                resp = r.json()["response"]
            except (httpx.HTTPError, ValueError, KeyError) as e:
                if self.failure_policy == "Ignore":
                    return obj, None
                return None, status(
                    500,
                    "InternalError",
                    f'Internal error occurred: failed calling webhook "admission.gpupool.dev": {e}',
                )
        if not resp.get("allowed"):
            st = resp.get("status") or {}
            return None, status(
                int(st.get("code") or 400),
                "Forbidden" if st.get("code") == 403 else "Invalid",
                f'admission webhook "admission.gpupool.dev" denied the request: '
                f"{st.get('message', '')}",
            )
        if resp.get("patch"):
            obj = json_patch(obj, json.loads(base64.b64decode(resp["patch"])))
        return obj, None

    def store_job(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        job = copy.deepcopy(body)
        meta = job.setdefault("metadata", {})
        meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", iso(self.kube.now()))
        meta["resourceVersion"] = self.kube.rv()
        job.setdefault("apiVersion", "batch/v1")
        job.setdefault("kind", "Job")
        job.setdefault("status", {})
        job["spec"].setdefault("suspend", False)
        before = self.jobs.get((ns, meta["name"]))
        self.jobs[(ns, meta["name"])] = job
        self.kube.watch.changed("jobs", copy.deepcopy(before), job)
        return job

    def job(self, ns: str, name: str) -> dict[str, Any]:
        with self.kube.lock:
            return copy.deepcopy(self.jobs[(ns, name)])

    def job_controller(self, ns: str, name: str) -> list[str]:
        """The job controller's pass over one Job: pods for an unsuspended one (through
        admission, as the controller's service account), none for a suspended one. The
        names of its pods."""
        kube = self.kube
        with kube.lock:
            job = copy.deepcopy(self.jobs[(ns, name)])
        mine = [
            k
            for k, p in kube.pods.items()
            if any(
                o.get("uid") == job["metadata"]["uid"]
                for o in p["metadata"].get("ownerReferences") or []
            )
        ]
        if job["spec"].get("suspend"):
            with kube.lock:
                for k in mine:
                    before = kube.pods.pop(k)
                    kube.watch.touch_pod(k, before)
            return []
        want = int(job["spec"].get("parallelism") or 1)
        for i in range(len(mine), want):
            template = copy.deepcopy(job["spec"]["template"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **(template.get("metadata") or {}),
                    "name": f"{name}-{i}",
                    "namespace": ns,
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": name,
                            "uid": job["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": template["spec"],
            }
            stored, refused = self.admit("Pod", ns, pod, JOB_CONTROLLER)
            assert refused is None and stored is not None, "a Job's pod was refused"
            with kube.lock:
                kube._store_pod(ns, stored)
        with kube.lock:
            active = len(mine) or want
            j = self.jobs[(ns, name)]
            before = copy.deepcopy(j)
            j["status"]["active"] = active
            j["metadata"]["resourceVersion"] = kube.rv()
            kube.watch.changed("jobs", before, j)
            return sorted(
                k[1]
                for k, p in kube.pods.items()
                if any(
                    o.get("uid") == job["metadata"]["uid"]
                    for o in p["metadata"].get("ownerReferences") or []
                )
            )

    def finish_job(self, ns: str, name: str, ok: bool = True) -> None:
        with self.kube.lock:
            j = self.jobs[(ns, name)]
            before = copy.deepcopy(j)
            cond = {"type": "Complete" if ok else "Failed", "status": "True"}
            if not ok:
                cond.update(
                    reason="BackoffLimitExceeded",
                    message="Job has reached the specified backoff limit",
                )
            j["status"] = {"conditions": [cond], "active": 0}
            j["metadata"]["resourceVersion"] = self.kube.rv()
            self.kube.watch.changed("jobs", before, j)

    # -- routes --------------------------------------------------------------------------------
    def routes(self, record: Callable[[Request], None]) -> list[Route]:
        kube = self

        def job_matches(j: dict[str, Any], q: Any) -> bool:
            return match_labels(j["metadata"].get("labels") or {}, q.get("labelSelector")) and (
                match_fields(j, q.get("fieldSelector"))
            )

        def listing(ns: str | None, q: Any) -> Response:
            with self.kube.lock:
                items = [
                    copy.deepcopy(j)
                    for (jns, _), j in self.jobs.items()
                    if (ns is None or jns == ns) and job_matches(j, q)
                ]
                rv = self.kube.rv()
            body = {
                "apiVersion": "batch/v1",
                "kind": "JobList",
                "metadata": {"resourceVersion": rv},
            }
            return JSONResponse({**body, "items": items})

        async def all_jobs(request: Request) -> Response:
            record(request)
            if request.query_params.get("watch") in ("true", "True", "1"):
                return self.kube.watch.response("jobs", request, job_matches)
            return listing(None, request.query_params)

        async def ns_jobs(request: Request) -> Response:
            record(request)
            ns = request.path_params["ns"]
            if request.method == "GET":
                return listing(ns, request.query_params)
            body = await request.json()
            name = (body.get("metadata") or {}).get("name")
            user = request.headers.get("impersonate-user", "kubernetes-admin")
            with self.kube.lock:
                if (ns, name) in self.jobs:
                    return status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            stored, refused = kube.admit("Job", ns, body, user)
            if refused is not None:
                return refused
            with self.kube.lock:
                return JSONResponse(copy.deepcopy(self.store_job(ns, stored or body)), 201)

        async def ns_job(request: Request) -> Response:
            record(request)
            ns, name = request.path_params["ns"], request.path_params["name"]
            key = (ns, name)
            patch = await request.json() if request.method == "PATCH" else None
            with self.kube.lock:
                if key not in self.jobs:
                    return status(404, "NotFound", f'jobs.batch "{name}" not found')
                job = self.jobs[key]
                if request.method == "GET":
                    return JSONResponse(copy.deepcopy(job))
                before = copy.deepcopy(job)
                if request.method == "DELETE":
                    del self.jobs[key]
                    self.kube.watch.changed("jobs", before, None)
                    return JSONResponse(before)
            user = request.headers.get("impersonate-user", "kubernetes-admin")
            new, refused = kube.update("Job", ns, before, patch, user)
            if refused is not None:
                return refused
            with self.kube.lock:
                new["metadata"]["resourceVersion"] = self.kube.rv()
                self.jobs[key] = new
                self.kube.watch.changed("jobs", before, new)
                return JSONResponse(copy.deepcopy(new))

        async def events(request: Request) -> Response:
            record(request)
            body = await request.json()
            with self.kube.lock:
                self.kube.events.append(body)
            return JSONResponse(body, 201)

        async def webhook_config(request: Request) -> Response:
            record(request)
            name = request.path_params["name"]
            patch = await request.json() if request.method == "PATCH" else None
            with self.kube.lock:
                cfg = self.webhook_configs.get(name)
                if cfg is None:
                    return status(
                        404, "NotFound", f'mutatingwebhookconfigurations "{name}" not found'
                    )
                if patch is not None:
                    cfg = json_patch(cfg, patch)
                    self.webhook_configs[name] = cfg
                return JSONResponse(copy.deepcopy(cfg))

        b = "/apis/batch/v1"
        return [
            Route(f"{b}/jobs", all_jobs),
            Route(f"{b}/namespaces/{{ns}}/jobs", ns_jobs, methods=["GET", "POST"]),
            Route(
                f"{b}/namespaces/{{ns}}/jobs/{{name}}", ns_job, methods=["GET", "PATCH", "DELETE"]
            ),
            Route("/api/v1/namespaces/{ns}/events", events, methods=["POST"]),
            Route(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
                webhook_config,
                methods=["GET", "PATCH"],
            ),
        ]
