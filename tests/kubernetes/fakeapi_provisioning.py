"""The fake API server's autoscaling (see fakeapi.py; issue 34): ProvisioningRequests
(``autoscaling.x-k8s.io/v1``, validated on create against `provreq_schema`, as the CRD's
structural schema makes kube-apiserver do: 422 Invalid), PodTemplates (core/v1), and
`FakeAutoscaler`: the Cluster Autoscaler's part, on an injected clock. Deleting a
ProvisioningRequest deletes the PodTemplates it owns (ownerReferences by uid), as the
garbage collector does. With `crd = False`
the cluster has no ProvisioningRequest API (404, as kube-apiserver answers for a resource
nobody serves).

`FakeAutoscaler.step()` (the test calls it, advancing its clock between calls): a node group
per pool (`add_group`) adds nodes `delay_s` after the step that first saw a request for it,
up to its maximum:

- a ProvisioningRequest of class best-effort-atomic-scale-up: all of its pods' nodes at
  once, then ``Provisioned=True``; when the group cannot hold them all, ``Failed=True``
  (nothing added: atomic); a group marked `stuck` never answers (the timeout path).
- of class check-capacity: ``Provisioned=True`` only when the existing nodes could hold
  it, else ``Provisioned=False`` (no node added, as the class says).
- pending placeholder pods (label gpupool.dev/placeholder): a node for each, then the pod
  bound there and Running.
"""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.kubernetes.provreq_schema import problems

if TYPE_CHECKING:
    from gpupool.clock import Clock
    from tests.kubernetes.fakeapi import FakeKube

PR_BASE = "/apis/autoscaling.x-k8s.io/v1"
POOL_LABEL = "gpupool.io/node-pool"


class ProvisioningFake:
    """ProvisioningRequests and PodTemplates of a `FakeKube`."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        #: whether the cluster serves the ProvisioningRequest API (its CRD is installed)
        self.crd = True
        self.requests: dict[tuple[str, str], dict[str, Any]] = {}
        self.templates: dict[tuple[str, str], dict[str, Any]] = {}
        #: every ProvisioningRequest created, as sent (for the tests)
        self.created: list[dict[str, Any]] = []
        #: PodTemplates the garbage collector removed with their ProvisioningRequest
        self.collected: list[tuple[str, str]] = []

    def _collect(self, ns: str, uid: str) -> None:
        """The garbage collector's part for a deleted ProvisioningRequest (`kube.lock` held):
        the PodTemplates of its namespace with an ownerReference to its uid go too (the
        rest of the fake API server has no garbage collector)."""
        for key, tpl in list(self.templates.items()):
            owners = tpl["metadata"].get("ownerReferences") or []
            if key[0] == ns and any(o.get("uid") == uid for o in owners):
                self.templates.pop(key)
                self.collected.append(key)

    def routes(self, record: Callable[[Request], None]) -> list[Route]:
        from tests.kubernetes.fakeapi import _match_labels, _status

        kube = self.kube

        def absent() -> Response:
            return _status(404, "NotFound", "the server could not find the requested resource")

        async def prs(request: Request) -> Response:
            record(request)
            if not self.crd:
                return absent()
            ns = request.path_params.get("ns")
            if request.method == "GET":
                sel = request.query_params.get("labelSelector")
                with kube.lock:
                    items = [
                        copy.deepcopy(o)
                        for (ons, _), o in self.requests.items()
                        if (ns is None or ons == ns)
                        and _match_labels(o["metadata"].get("labels") or {}, sel)
                    ]
                body = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequestList"}
                return JSONResponse({**body, "metadata": {}, "items": items})
            body = await request.json()
            wrong = problems(body)
            if wrong:
                return _status(422, "Invalid", f"ProvisioningRequest is invalid: {wrong}")
            name = body["metadata"]["name"]
            with kube.lock:
                if ns not in kube.namespaces:
                    return _status(404, "NotFound", f'namespaces "{ns}" not found')
                if (ns, name) in self.requests:
                    return _status(409, "AlreadyExists", f'provisioningrequests "{name}" exists')
                obj = copy.deepcopy(body)
                meta = obj["metadata"]
                meta.update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion=kube.rv())
                meta["creationTimestamp"] = "2026-11-28T10:00:00Z"
                obj["status"] = {"conditions": []}
                self.requests[(ns, name)] = obj
                self.created.append(copy.deepcopy(body))
            return JSONResponse(copy.deepcopy(obj), status_code=201)

        async def pr(request: Request) -> Response:
            record(request)
            if not self.crd:
                return absent()
            key = (request.path_params["ns"], request.path_params["name"])
            with kube.lock:
                if key not in self.requests:
                    return _status(404, "NotFound", f'provisioningrequests "{key[1]}" not found')
                obj = self.requests[key]
                if request.method == "DELETE":
                    self.requests.pop(key)
                    self._collect(key[0], obj["metadata"]["uid"])
                return JSONResponse(copy.deepcopy(obj))

        async def templates(request: Request) -> Response:
            record(request)
            ns = request.path_params["ns"]
            body = await request.json()
            name = body["metadata"]["name"]
            with kube.lock:
                if ns not in kube.namespaces:
                    return _status(404, "NotFound", f'namespaces "{ns}" not found')
                if (ns, name) in self.templates:
                    return _status(409, "AlreadyExists", f'podtemplates "{name}" exists')
                body["metadata"]["namespace"] = ns
                self.templates[(ns, name)] = body
            return JSONResponse(copy.deepcopy(body), status_code=201)

        async def template(request: Request) -> Response:
            record(request)
            key = (request.path_params["ns"], request.path_params["name"])
            with kube.lock:
                obj = self.templates.pop(key, None)
            if obj is None:
                return _status(404, "NotFound", f'podtemplates "{key[1]}" not found')
            return JSONResponse(obj)

        return [
            Route(PR_BASE + "/provisioningrequests", prs, methods=["GET"]),
            Route(PR_BASE + "/namespaces/{ns}/provisioningrequests", prs, methods=["GET", "POST"]),
            Route(
                PR_BASE + "/namespaces/{ns}/provisioningrequests/{name}",
                pr,
                methods=["GET", "DELETE"],
            ),
            Route("/api/v1/namespaces/{ns}/podtemplates", templates, methods=["POST"]),
            Route("/api/v1/namespaces/{ns}/podtemplates/{name}", template, methods=["DELETE"]),
        ]


@dataclass
class NodeGroup:
    """A node group of the autoscaler: nodes of `gpus` GPUs with `labels`, at most `max_nodes`."""

    pool: str
    gpus: int
    max_nodes: int
    labels: dict[str, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    stuck: bool = False


def _set_condition(obj: dict[str, Any], kind: str, status: str, reason: str, msg: str) -> None:
    conds = [c for c in obj["status"]["conditions"] if c["type"] != kind]
    conds.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": msg,
            "lastTransitionTime": "2026-11-28T10:00:00Z",
        }
    )
    obj["status"]["conditions"] = conds


class FakeAutoscaler:
    """The Cluster Autoscaler's part (see the module); `step()` acts at `clock.now()`."""

    def __init__(self, kube: FakeKube, clock: Clock, delay_s: float = 60.0) -> None:
        self.kube, self.clock, self.delay_s = kube, clock, delay_s
        self.groups: dict[str, NodeGroup] = {}
        self._seen: dict[str, float] = {}  # object key -> when first seen

    def add_group(self, pool: str, gpus: int, max_nodes: int, **labels: str) -> NodeGroup:
        g = NodeGroup(pool, gpus, max_nodes, {POOL_LABEL: pool, **labels})
        self.groups[pool] = g
        return g

    def _due(self, key: str) -> bool:
        first = self._seen.setdefault(key, self.clock.now())
        return self.clock.now() - first >= self.delay_s

    def _grow(self, g: NodeGroup, n: int) -> list[str]:
        names = []
        for _ in range(n):
            name = f"{g.pool}-node-{len(g.added) + 1}"
            self.kube.add_node(name, g.gpus, labels=g.labels)
            g.added.append(name)
            names.append(name)
        return names

    def step(self) -> None:
        prov = self.kube.provisioning
        with self.kube.lock:
            prs = list(prov.requests.items())
        for (ns, name), obj in prs:
            done = ("Provisioned", "Failed")
            if any(
                c["type"] in done and c["status"] == "True" for c in obj["status"]["conditions"]
            ):
                continue
            self._request(ns, name, obj)
        for pod in self.kube.pods_of("gpupool.dev/placeholder"):
            if pod["spec"].get("nodeName"):
                continue
            g = self.groups.get(pod["spec"].get("nodeSelector", {}).get(POOL_LABEL, ""))
            key = f"pod/{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            if g is None or g.stuck or not self._due(key) or len(g.added) >= g.max_nodes:
                continue
            (node,) = self._grow(g, 1)
            meta = pod["metadata"]
            self.kube.set_phase(meta["namespace"], meta["name"], "Running", node=node)

    def _request(self, ns: str, name: str, obj: dict[str, Any]) -> None:
        prov = self.kube.provisioning
        with self.kube.lock:
            _set_condition(obj, "Accepted", "True", "Accepted", "accepted by the fake autoscaler")
        sets = []
        for s in obj["spec"]["podSets"]:
            tpl = prov.templates[(ns, s["podTemplateRef"]["name"])]["template"]["spec"]
            gpus = int(tpl["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu", 0))
            sets.append((tpl["nodeSelector"].get(POOL_LABEL, ""), gpus, s["count"]))
        pool = sets[0][0]
        g = self.groups.get(pool)
        if g is None or g.stuck or not self._due(f"pr/{ns}/{name}"):
            return
        per_node = max(1, g.gpus)
        need = sum(math.ceil(c * max(gpus, 1) / per_node) if gpus else 0 for _, gpus, c in sets)
        need = max(need, 1)
        check = obj["spec"]["provisioningClassName"].startswith("check-capacity")
        with self.kube.lock:
            if check:
                _set_condition(obj, "Provisioned", "False", "CapacityIsNotFound", "no capacity")
            elif len(g.added) + need > g.max_nodes:
                _set_condition(
                    obj,
                    "Failed",
                    "True",
                    "CapacityIsNotFound",
                    f"node group {pool} is at its maximum of {g.max_nodes} nodes",
                )
            else:
                self._grow(g, need)
                _set_condition(obj, "Provisioned", "True", "Provisioned", f"{need} node(s) added")
