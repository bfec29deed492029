"""A stateful fake Kubernetes API server over real HTTP, for the kubernetes engine's tests.

The subset of core/v1 the engine uses: nodes (list), pods
(create/get/list/patch/delete/log, labelSelector and fieldSelector `spec.nodeName`),
events (list, fieldSelector `involvedObject.name`), namespaces (create/get/patch) and the
tenancy objects: resourcequotas, persistentvolumeclaims, services, secrets (core/v1), roles,
rolebindings (rbac.authorization.k8s.io/v1) and networkpolicies (networking.k8s.io/v1), each
with create/get/list/patch (merge)/delete. No garbage collector: an object whose owner is
deleted stays (so a test sees whether gpupool deleted it), except the PodTemplates a deleted
ProvisioningRequest owns (fakeapi_provisioning.py). A pod create over a quota's
`requests.nvidia.com/gpu` is answered 403 "exceeded quota", as the real admission plugin
does. A Role or RoleBinding granting more than the engine holds is answered 403, as RBAC's
escalation prevention does (`fakeapi_objects.py`). Nothing schedules: kube-scheduler's and
the kubelet's part is scripted by the test through `FakeKube` (bind a pod, set its phase,
exit code, events; make a node NotReady or cordoned; delete a pod behind gpupool's back).

Pods and nodes can be watched (`?watch=true`, `fakeapi_watch.py`): every change below is
recorded with its resourceVersion; `kube.watch` scripts 410 Gone, dropped and failing
streams and a watcher left behind (see there).

Kubernetes-native work (`fakeapi_native.py`, `FakeKube.native`): Pod and Job creates and
updates go through gpupool's admission webhook over HTTPS once registered, a gated pod is
never bound, Jobs (batch/v1) are stored, watched, suspended and resumed
(`native.job_controller`), and Events gpupool writes are kept in `events`. How the API
speaks (Status errors, selectors, merge and JSON patches) is `fakeapi_wire.py`, which the
parts share.

Served by uvicorn in a thread on a free loopback port; the official `kubernetes` client
talks to it through `FakeKube.client()`.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.kubernetes.fakeapi_native import NativeFake
from tests.kubernetes.fakeapi_objects import object_routes
from tests.kubernetes.fakeapi_provisioning import ProvisioningFake
from tests.kubernetes.fakeapi_watch import WatchHub
from tests.kubernetes.fakeapi_wire import iso
from tests.kubernetes.fakeapi_wire import match_fields as _match_fields
from tests.kubernetes.fakeapi_wire import match_labels as _match_labels
from tests.kubernetes.fakeapi_wire import merge as _merge
from tests.kubernetes.fakeapi_wire import status as _status
from tests.support import ServedApp

GPU = "nvidia.com/gpu"


def _gpu_request(pod: dict[str, Any]) -> int:
    n = 0
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources") or {}
        q = (res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU)
        n += int(q or 0)
    return n


def container_env(
    pod: dict[str, Any], secrets: dict[tuple[str, str], dict[str, Any]] | None = None
) -> dict[str, str]:
    """The first container's environment as the kubelet resolves it: plain values, and
    `secretKeyRef`s read from `secrets` (the fake's store), or shown as `secret:<name>/<key>`
    when `secrets` is None (a pure builder's pod)."""
    import base64

    ns = pod["metadata"].get("namespace", "")
    out = {}
    for e in pod["spec"]["containers"][0].get("env") or []:
        if "value" in e:
            out[e["name"]] = e["value"]
            continue
        ref = e["valueFrom"]["secretKeyRef"]
        if secrets is None:
            out[e["name"]] = f"secret:{ref['name']}/{ref['key']}"
        else:
            data = secrets[(ns, ref["name"])]["data"]
            out[e["name"]] = base64.b64decode(data[ref["key"]]).decode()
    return out


class FakeKube:
    """The fake API server's state and the test's control handle."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.quotas: dict[tuple[str, str], dict[str, Any]] = {}
        #: the namespaced tenancy objects by resource (plural), `quotas` among them
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            "resourcequotas": self.quotas,
            "persistentvolumeclaims": {},
            "rolebindings": {},
            "roles": {},
            "networkpolicies": {},
            "services": {},
            "secrets": {},
        }
        self.logs: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) of the engine's requests
        self.user_requests: list[tuple[str, str]] = []  # those made as a user (kubectl --as)
        self.deletes: list[tuple[str, str, int | None]] = []  # (ns, name, grace seconds)
        self._rv = itertools.count(1)
        #: the API server's clock: an object's creationTimestamp
        self.now: Callable[[], float] = time.time
        self.watch = WatchHub(self)
        self.native = NativeFake(self)
        #: ProvisioningRequests and PodTemplates (fakeapi_provisioning.py)
        self.provisioning = ProvisioningFake(self)
        self.port = 0
        self._served: ServedApp | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> FakeKube:
        self._served = ServedApp(self.app(), lifespan="off")
        self.port = self._served.port
        self._served.start()
        return self

    def stop(self) -> None:
        if self._served is not None:
            self._served.stop()
            self._served = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        """An official `kubernetes.client.ApiClient` pointed at this server."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    def kubeconfig(self, path: Any) -> None:
        """Write a kubeconfig file for this server at `path`."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )

    # -- control handle ---------------------------------------------------------------
    def rv(self) -> str:
        return str(next(self._rv))

    def end_watches(self) -> None:
        """End every open watch stream (see `self.watch` for the other controls)."""
        self.watch.end_watches()

    def add_node(
        self,
        name: str,
        gpus: int = 0,
        *,
        labels: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
        ready: bool = True,
    ) -> None:
        alloc = {"cpu": "16", "memory": "64Gi", GPU: str(gpus), **(extra or {})}
        with self.lock:
            before = copy.deepcopy(self.nodes.get(name))
            self.nodes[name] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": self.rv(),
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
                "spec": {},
                "status": {
                    "capacity": dict(alloc),
                    "allocatable": dict(alloc),
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                },
            }
            self.watch.touch_node(name, before)

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            before = copy.deepcopy(self.nodes[name])
            self.nodes[name]["status"]["conditions"] = [
                {"type": "Ready", "status": "True" if ready else "False"}
            ]
            self.watch.touch_node(name, before)

    def cordon(self, name: str, cordoned: bool = True) -> None:
        with self.lock:
            before = copy.deepcopy(self.nodes[name])
            self.nodes[name]["spec"]["unschedulable"] = cordoned
            self.watch.touch_node(name, before)

    def add_quota(self, namespace: str, name: str, gpus: int) -> None:
        with self.lock:
            self.quotas[(namespace, name)] = {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"hard": {f"requests.{GPU}": str(gpus)}},
            }

    def add_namespace(self, name: str, tenant: str | None = None, **labels: str) -> None:
        """A namespace made outside the engine: `tenant` marks it as that gpupool tenant's
        (annotation `gpupool.dev/tenant`), None as nobody's."""
        meta: dict[str, Any] = {"name": name, "resourceVersion": self.rv(), "labels": labels}
        if tenant is not None:
            meta["annotations"] = {"gpupool.dev/tenant": tenant}
        with self.lock:
            self.namespaces[name] = {"metadata": meta, "status": {"phase": "Active"}}

    def env_of(self, pod: dict[str, Any]) -> dict[str, str]:
        """A pod's first container's environment, its Secrets read (the kubelet's part)."""
        with self.lock:
            return container_env(pod, self.objects["secrets"])

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.pods[(namespace, name)])

    def pods_of(self, label_selector: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(p)
                for p in self.pods.values()
                if _match_labels(p["metadata"].get("labels") or {}, label_selector)
            ]

    def add_pod(self, pod: dict[str, Any]) -> None:
        """A pod created by someone else than gpupool (kubectl, another controller)."""
        with self.lock:
            self._store_pod(pod["metadata"].get("namespace", "default"), pod)

    def set_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        node: str | None = None,
        exit_code: int | None = None,
        reason: str | None = None,
        pod_ip: str | None = None,
        message: str | None = None,
    ) -> None:
        """What kube-scheduler and the kubelet would do: bind, run, terminate (or, Pending
        with a `reason` and `message`, keep the container waiting)."""
        with self.lock:
            p = self.pods[(namespace, name)]
            before = copy.deepcopy(p)
            if node is not None:
                gates = p["spec"].get("schedulingGates")
                assert not gates, f"kube-scheduler never binds a gated pod ({gates})"
                p["spec"]["nodeName"] = node
            st = p.setdefault("status", {})
            st["phase"] = phase
            cname = p["spec"]["containers"][0]["name"]
            if pod_ip is not None:
                st["podIP"] = pod_ip
            if phase == "Running":
                st["startTime"] = "2026-11-25T10:00:00Z"
                state: dict[str, Any] = {"running": {"startedAt": "2026-11-25T10:00:01Z"}}
            elif phase in ("Succeeded", "Failed"):
                state = {
                    "terminated": {
                        "exitCode": exit_code if exit_code is not None else 0,
                        "reason": reason or ("Completed" if exit_code in (0, None) else "Error"),
                        "startedAt": "2026-11-25T10:00:01Z",
                        "finishedAt": "2026-11-25T10:01:00Z",
                    }
                }
            else:
                state = {"waiting": {"reason": reason or "ContainerCreating"}}
                if message is not None:
                    state["waiting"]["message"] = message
            st["containerStatuses"] = [
                {
                    "name": cname,
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": state,
                }
            ]
            self.watch.touch_pod((namespace, name), before)

    def set_unschedulable(self, namespace: str, name: str, message: str) -> None:
        """kube-scheduler could not place it: a PodScheduled=False condition and an event."""
        with self.lock:
            p = self.pods[(namespace, name)]
            before = copy.deepcopy(p)
            p.setdefault("status", {})["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
            self.watch.touch_pod((namespace, name), before)
            self.add_event(namespace, name, "FailedScheduling", message)

    def add_event(self, namespace: str, pod: str, reason: str, message: str) -> None:
        with self.lock:
            self.events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{pod}.{len(self.events)}", "namespace": namespace},
                    "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
                    "reason": reason,
                    "message": message,
                    "type": "Warning",
                    "count": 1,
                }
            )

    def vanish(self, namespace: str, name: str) -> None:
        """Delete a pod behind gpupool's back (kubectl delete --force)."""
        with self.lock:
            before = self.pods.pop((namespace, name), None)
            self.watch.touch_pod((namespace, name), before)

    def write_log(self, namespace: str, name: str, text: str) -> None:
        with self.lock:
            self.logs[(namespace, name)] = self.logs.get((namespace, name), "") + text

    # -- the server --------------------------------------------------------------------
    def _store_pod(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        pod = copy.deepcopy(body)
        meta = pod.setdefault("metadata", {})
        meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = self.rv()
        meta.setdefault("creationTimestamp", iso(self.now()))
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        before = self.pods.get((ns, meta["name"]))
        self.pods[(ns, meta["name"])] = pod
        self.watch.touch_pod((ns, meta["name"]), copy.deepcopy(before))
        return pod

    def _quota_refusal(self, ns: str, pod: dict[str, Any]) -> str | None:
        want = _gpu_request(pod)
        if not want or not any(qns == ns for qns, _ in self.quotas):
            return None
        used = sum(
            _gpu_request(p)
            for (pns, _), p in self.pods.items()
            if pns == ns and p["status"].get("phase") not in ("Succeeded", "Failed")
        )
        for (qns, qname), q in self.quotas.items():
            hard = q["spec"]["hard"].get(f"requests.{GPU}")
            if qns == ns and hard is not None and used + want > int(hard):
                return (
                    f'pods "{pod["metadata"]["name"]}" is forbidden: exceeded quota: {qname}, '
                    f"requested: requests.{GPU}={want}, used: requests.{GPU}={used}, "
                    f"limited: requests.{GPU}={hard}"
                )
        return None

    def app(self) -> Starlette:
        def record(request: Request) -> None:
            watch = request.query_params.get("watch") in ("true", "True", "1")
            seen = ("WATCH" if watch else request.method, request.url.path)
            if "impersonate-user" in request.headers:  # a user's kubectl, not the engine
                self.user_requests.append(seen)
            else:
                self.requests.append(seen)

        def node_matches(n: dict[str, Any], q: Any) -> bool:
            return _match_labels(n["metadata"].get("labels") or {}, q.get("labelSelector"))

        def pod_matches(p: dict[str, Any], q: Any) -> bool:
            labels = p["metadata"].get("labels") or {}
            return _match_labels(labels, q.get("labelSelector")) and _match_fields(
                p, q.get("fieldSelector")
            )

        def watching(request: Request) -> bool:
            return request.query_params.get("watch") in ("true", "True", "1")

        async def nodes(request: Request) -> Response:
            record(request)
            q = request.query_params
            if watching(request):
                return self.watch.response("nodes", request, node_matches)
            with self.lock:
                items = [
                    copy.deepcopy(n)
                    for n in self.nodes.values()
                    if _match_labels(n["metadata"]["labels"], q.get("labelSelector"))
                ]
            return JSONResponse(
                {
                    "apiVersion": "v1",
                    "kind": "NodeList",
                    "metadata": {"resourceVersion": self.rv()},
                    "items": items,
                }
            )

        async def namespaces(request: Request) -> Response:
            record(request)
            body = await request.json()
            name = body["metadata"]["name"]
            with self.lock:
                if name in self.namespaces:
                    return _status(409, "AlreadyExists", f'namespaces "{name}" already exists')
                body.setdefault("status", {"phase": "Active"})
                body["metadata"]["resourceVersion"] = self.rv()
                self.namespaces[name] = body
            return JSONResponse(body, status_code=201)

        async def namespace(request: Request) -> Response:
            record(request)
            name = request.path_params["name"]
            patch = await request.json() if request.method == "PATCH" else None
            with self.lock:
                if name not in self.namespaces:
                    return _status(404, "NotFound", f'namespaces "{name}" not found')
                if patch is not None:
                    _merge(self.namespaces[name], patch)
                    self.namespaces[name]["metadata"]["resourceVersion"] = self.rv()
                return JSONResponse(copy.deepcopy(self.namespaces[name]))

        def list_pods(ns: str | None, request: Request) -> Response:
            q = request.query_params
            with self.lock:  # encoded under the lock: no copies of 5,000 pods
                items = [
                    p
                    for (pns, _), p in self.pods.items()
                    if (ns is None or pns == ns)
                    and _match_labels(p["metadata"].get("labels") or {}, q.get("labelSelector"))
                    and _match_fields(p, q.get("fieldSelector"))
                ]
                body = json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "PodList",
                        "metadata": {"resourceVersion": self.rv()},
                        "items": items,
                    }
                )
            return Response(body, media_type="application/json")

        async def all_pods(request: Request) -> Response:
            record(request)
            if watching(request):
                return self.watch.response("pods", request, pod_matches)
            return list_pods(None, request)

        async def ns_pods(request: Request) -> Response:
            record(request)
            ns = request.path_params["ns"]
            if request.method == "GET":
                return list_pods(ns, request)
            body = await request.json()
            name = body.get("metadata", {}).get("name")
            user = request.headers.get("impersonate-user", "kubernetes-admin")
            with self.lock:
                known = ns in self.namespaces and (ns, name) not in self.pods
            if known:  # admission (the webhook) before storing, as kube-apiserver does
                admitted, refused = self.native.admit("Pod", ns, body, user)
                if refused is not None:
                    return refused
                body = admitted or body
            with self.lock:
                if ns not in self.namespaces:
                    return _status(404, "NotFound", f'namespaces "{ns}" not found')
                if (ns, name) in self.pods:
                    return _status(409, "AlreadyExists", f'pods "{name}" already exists')
                refusal = self._quota_refusal(ns, body)
                if refusal is not None:
                    return _status(403, "Forbidden", refusal)
                pod = self._store_pod(ns, body)
                return JSONResponse(copy.deepcopy(pod), status_code=201)

        async def ns_pod(request: Request) -> Response:
            record(request)
            ns, name = request.path_params["ns"], request.path_params["name"]
            key = (ns, name)
            with self.lock:
                if key not in self.pods:
                    return _status(404, "NotFound", f'pods "{name}" not found')
                if request.method == "GET":
                    return JSONResponse(copy.deepcopy(self.pods[key]))
            if request.method == "PATCH":
                patch = await request.json()
                user = request.headers.get("impersonate-user", "kubernetes-admin")
                with self.lock:
                    before = copy.deepcopy(self.pods[key])
                # the update through admission (the webhook's UPDATE rule), then stored
                pod, refused = self.native.update("Pod", ns, before, patch, user)
                if refused is not None:
                    return refused
                with self.lock:
                    self.pods[key] = pod
                    self.watch.touch_pod(key, before)
                    return JSONResponse(copy.deepcopy(pod))
            # DELETE
            grace = None
            raw = await request.body()
            if raw:
                opts = json.loads(raw)
                grace = opts.get("gracePeriodSeconds")
            if grace is None and "gracePeriodSeconds" in request.query_params:
                grace = int(request.query_params["gracePeriodSeconds"])
            with self.lock:
                self.deletes.append((ns, name, grace))
                pod = self.pods[key]
                before = copy.deepcopy(pod)
                if grace == 0 or pod["status"].get("phase") in ("Succeeded", "Failed", "Pending"):
                    self.pods.pop(key)
                else:  # graceful: the kubelet sends SIGTERM; the test decides when it ends
                    pod["metadata"]["deletionTimestamp"] = "2026-11-25T10:05:00Z"
                    pod["metadata"]["deletionGracePeriodSeconds"] = grace
                self.watch.touch_pod(key, before)
                return JSONResponse(copy.deepcopy(pod))

        async def pod_log(request: Request) -> Response:
            record(request)
            ns, name = request.path_params["ns"], request.path_params["name"]
            with self.lock:
                if (ns, name) not in self.pods:
                    return _status(404, "NotFound", f'pods "{name}" not found')
                text = self.logs.get((ns, name), "")
            tail = request.query_params.get("tailLines")
            if tail is not None:
                lines = text.splitlines(keepends=True)
                text = "".join(lines[-int(tail) :]) if int(tail) else ""
            return PlainTextResponse(text)

        async def events(request: Request) -> Response:
            record(request)
            ns = request.path_params["ns"]
            fs = request.query_params.get("fieldSelector")
            with self.lock:
                items = [
                    copy.deepcopy(e)
                    for e in self.events
                    if e["metadata"]["namespace"] == ns and _match_fields(e, fs)
                ]
            return JSONResponse(
                {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": items}
            )

        async def quotas(request: Request) -> Response:
            record(request)
            ns = request.path_params["ns"]
            with self.lock:
                items = [copy.deepcopy(q) for (qns, _), q in self.quotas.items() if qns == ns]
            return JSONResponse(
                {"apiVersion": "v1", "kind": "ResourceQuotaList", "metadata": {}, "items": items}
            )

        return Starlette(
            routes=[
                Route("/api/v1/nodes", nodes),
                Route("/api/v1/namespaces", namespaces, methods=["POST"]),
                Route("/api/v1/namespaces/{name}", namespace, methods=["GET", "PATCH"]),
                Route("/api/v1/pods", all_pods),
                Route("/api/v1/namespaces/{ns}/pods", ns_pods, methods=["GET", "POST"]),
                Route(
                    "/api/v1/namespaces/{ns}/pods/{name}",
                    ns_pod,
                    methods=["GET", "PATCH", "DELETE"],
                ),
                Route("/api/v1/namespaces/{ns}/pods/{name}/log", pod_log),
                Route("/api/v1/namespaces/{ns}/events", events),
                Route("/api/v1/namespaces/{ns}/resourcequotas", quotas, methods=["GET"]),
                *self.native.routes(record),
                *self.provisioning.routes(record),
                *object_routes(self, record),
            ]
        )
