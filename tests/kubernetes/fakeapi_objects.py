"""The fake API server's tenancy objects (see fakeapi.py): resourcequotas,
persistentvolumeclaims, services (a gang's headless Service), secrets (a workload's env)
(core/v1), roles and rolebindings (rbac.authorization.k8s.io/v1) and networkpolicies
(networking.k8s.io/v1), with create/get/list/patch (merge)/delete, kept in
`FakeKube.objects[resource][(namespace, name)]`."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.kubernetes.fakeapi_wire import merge, status

if TYPE_CHECKING:
    from tests.kubernetes.fakeapi import FakeKube

GROUPS = ("/api/v1", "/apis/rbac.authorization.k8s.io/v1", "/apis/networking.k8s.io/v1")


def object_routes(self: FakeKube, record: Callable[[Request], None]) -> list[Route]:
    """The routes of the tenancy objects, served from `self` (a FakeKube)."""

    def kinds(resource: str) -> tuple[str, str]:
        kind = {
            "resourcequotas": "ResourceQuota",
            "persistentvolumeclaims": "PersistentVolumeClaim",
            "rolebindings": "RoleBinding",
            "roles": "Role",
            "networkpolicies": "NetworkPolicy",
            "services": "Service",
            "secrets": "Secret",
        }[resource]
        group = {
            "rolebindings": "rbac.authorization.k8s.io/v1",
            "roles": "rbac.authorization.k8s.io/v1",
            "networkpolicies": "networking.k8s.io/v1",
        }.get(resource, "v1")
        return kind, group

    def escalation(res: str, body: dict[str, Any], ns: str) -> str | None:
        """Kubernetes' RBAC escalation prevention for the engine's own ServiceAccount: a Role
        (or the Role a RoleBinding names) may grant only what the engine holds itself
        (`rbac_rules.held`; it has no `bind` or `escalate`)."""
        from tests.kubernetes.rbac_rules import held

        if res == "rolebindings":
            ref = body.get("roleRef") or {}
            if ref.get("kind") != "Role":
                return f"no bind on {ref.get('kind')} {ref.get('name')!r}"
            role = self.objects["roles"].get((ns, ref.get("name", "")))
            rules = (role or {}).get("rules") or []
        elif res == "roles":
            rules = body.get("rules") or []
        else:
            return None
        for rule in rules:
            for group in rule.get("apiGroups") or [""]:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        if not held(group, resource, verb):
                            return (
                                "attempting to grant RBAC permissions not currently held: "
                                f"{group}/{resource} {verb}"
                            )
        return None

    async def collection(request: Request) -> Response:
        record(request)
        ns, res = request.path_params["ns"], request.path_params["res"]
        if res not in self.objects:
            return status(404, "NotFound", f"the server could not find {res}")
        kind, group = kinds(res)
        store = self.objects[res]
        if request.method == "GET":
            with self.lock:
                items = [copy.deepcopy(o) for (ons, _), o in store.items() if ons == ns]
            return JSONResponse(
                {"apiVersion": group, "kind": f"{kind}List", "metadata": {}, "items": items}
            )
        body = await request.json()
        name = body.get("metadata", {}).get("name")
        with self.lock:
            if ns not in self.namespaces:
                return status(404, "NotFound", f'namespaces "{ns}" not found')
            if (ns, name) in store:
                return status(409, "AlreadyExists", f'{res} "{name}" already exists')
            refused = escalation(res, body, ns)
            if refused is not None:
                return status(403, "Forbidden", f'{res} "{name}" is forbidden: {refused}')
            body["metadata"]["namespace"] = ns
            body["metadata"]["resourceVersion"] = self.rv()
            body["metadata"].setdefault("uid", str(uuid.uuid4()))
            store[(ns, name)] = body
            return JSONResponse(copy.deepcopy(body), status_code=201)

    async def item(request: Request) -> Response:
        record(request)
        ns, res, name = (request.path_params[k] for k in ("ns", "res", "name"))
        if res not in self.objects:
            return status(404, "NotFound", f"the server could not find {res}")
        store = self.objects[res]
        patch = await request.json() if request.method == "PATCH" else None
        with self.lock:
            if (ns, name) not in store:
                return status(404, "NotFound", f'{res} "{name}" not found')
            obj = store[(ns, name)]
            if request.method == "DELETE":
                store.pop((ns, name))
            elif patch is not None:
                refused = escalation(res, merge(copy.deepcopy(obj), patch), ns)
                if refused is not None:
                    return status(403, "Forbidden", f'{res} "{name}" is forbidden: {refused}')
                merge(obj, patch)
                obj["metadata"]["resourceVersion"] = self.rv()
            return JSONResponse(copy.deepcopy(obj))

    routes: list[Any] = []
    for base in GROUPS:
        routes.append(Route(base + "/namespaces/{ns}/{res}", collection, methods=["GET", "POST"]))
        routes.append(
            Route(
                base + "/namespaces/{ns}/{res}/{name}",
                item,
                methods=["GET", "PATCH", "DELETE"],
            )
        )
    return routes
