"""Every route x every role, against an explicit policy table.

A route that is not in POLICY fails `test_policy_lists_every_route`, so nothing new can be
left unprotected by accident. "Allowed" means the answer is neither 401 nor 403.
Fixture roles (see conftest): root is admin; tina tenant-admin of lab; ann member of lab;
vic viewer of lab; otto member of other. Each probe runs with a fresh token of its role.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpupool.server.routes import iter_routes
from gpupool.server.services.accounts import issue_token
from tests.server.conftest import API, PASSWORD, USERS

ADMIN = {"admin"}
MANAGERS = {"admin", "tenant-admin"}
SUBMITTERS = {"admin", "tenant-admin", "member"}
LAB_READERS = {"admin", "tenant-admin", "member", "viewer"}
ANY_USER = {"admin", "tenant-admin", "member", "viewer", "outsider"}
PUBLIC = ANY_USER | {"anonymous"}
ROLES = sorted(PUBLIC)


def _submit(w) -> dict[str, str]:
    return {"wid": w.submit(gpus=1)["id"]}


def _ann_token(w) -> dict[str, str]:
    return {"tid": issue_token(w.ctx, "ann", "probe", None).id}


def _subtenant(w) -> dict[str, str]:
    assert w.post("admin", "/tenants", json={"name": "lab/sub"}).status_code == 201
    return {}


def _node9(w) -> dict[str, str]:
    assert w.put("admin", "/nodes/n9", json={}).status_code == 200
    return {}


def _node_token(w) -> dict[str, str]:
    r = w.post("admin", "/nodes/n1/tokens")
    assert r.status_code == 201, r.text
    return {"tid": r.json()["id"]}


POOL_BODY = {"gpus": 8, "gpu_model": "H100", "cpus": 64, "memory_mib": 512000, "max_nodes": 2}


def _pool(w) -> dict[str, str]:
    r = w.post("admin", "/node-pools", json={"name": "pool1", **POOL_BODY})
    assert r.status_code == 201, r.text
    return {}


def _profile(w) -> dict[str, str]:
    body = {"name": "p1", "gpus": 1, "tenants": ["lab"]}
    assert w.post("admin", "/profiles", json=body).status_code == 201
    return {}


def _budget(w) -> dict[str, str]:
    r = w.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 10})
    assert r.status_code == 200, r.text
    return {"bid": str(r.json()["id"])}


BOOKING = {"tenant": "lab", "gpus": 1, "start": 1_780_100_000.0, "end": 1_780_103_600.0}


def _reservation(w) -> dict[str, str]:
    r = w.post("admin", "/reservations", json=BOOKING)
    assert r.status_code == 201, r.text
    return {"rid": r.json()["id"]}


@dataclass
class Probe:
    path: str  # concrete path; {placeholders} are filled from setup's result
    allowed: set[str]
    body: dict | None = None
    setup: Callable | None = None
    params: dict = field(default_factory=dict)
    #: the route answers 404, as for a thing that does not exist, to roles that may not see
    #: what it names (no existence oracle, review F10): such a 404 counts as denied
    hides: bool = False


JOB = {"tenant": "lab", "gpus": 1, "command": ["true"]}

POLICY: dict[tuple[str, str], Probe] = {
    ("GET", "/api/v1/openapi.json"): Probe("/api/v1/openapi.json", PUBLIC),
    ("GET", "/api/v1/docs"): Probe("/api/v1/docs", PUBLIC),
    ("POST", "/api/v1/auth/login"): Probe(
        API + "/auth/login", PUBLIC, {"username": "ann", "password": PASSWORD}
    ),
    ("POST", "/api/v1/auth/logout"): Probe(API + "/auth/logout", ANY_USER),
    ("GET", "/api/v1/auth/me"): Probe(API + "/auth/me", ANY_USER),
    ("GET", "/api/v1/auth/csrf"): Probe(API + "/auth/csrf", ANY_USER),
    ("GET", "/api/v1/tokens"): Probe(API + "/tokens", ANY_USER),
    ("POST", "/api/v1/tokens"): Probe(API + "/tokens", ANY_USER, {"name": "x"}),
    ("DELETE", "/api/v1/tokens/{token_id}"): Probe(
        API + "/tokens/{tid}", {"admin", "member"}, setup=_ann_token, hides=True
    ),
    ("GET", "/api/v1/users"): Probe(API + "/users", MANAGERS),
    ("POST", "/api/v1/users"): Probe(API + "/users", ADMIN, {"name": "probe-user"}),
    ("GET", "/api/v1/users/{name}"): Probe(API + "/users/ann", MANAGERS | {"member"}, hides=True),
    ("PATCH", "/api/v1/users/{name}"): Probe(
        API + "/users/ann", {"admin", "member"}, {"password": "a new long password"}, hides=True
    ),
    ("PUT", "/api/v1/users/{name}/memberships/{tenant:path}"): Probe(
        API + "/users/otto/memberships/lab", MANAGERS, {"role": "viewer"}, hides=True
    ),
    ("DELETE", "/api/v1/users/{name}/memberships/{tenant:path}"): Probe(
        API + "/users/vic/memberships/lab", MANAGERS, hides=True
    ),
    ("GET", "/api/v1/tenants"): Probe(API + "/tenants", ANY_USER),
    ("POST", "/api/v1/tenants"): Probe(API + "/tenants", MANAGERS, {"name": "lab/new"}),
    ("GET", "/api/v1/tenants/{name:path}"): Probe(API + "/tenants/lab", LAB_READERS, hides=True),
    ("PATCH", "/api/v1/tenants/{name:path}"): Probe(
        API + "/tenants/lab/sub", MANAGERS, {"idle_timeout_s": 600}, _subtenant, hides=True
    ),
    ("DELETE", "/api/v1/tenants/{name:path}"): Probe(
        API + "/tenants/lab/sub", MANAGERS, setup=_subtenant, hides=True
    ),
    ("GET", "/api/v1/nodes"): Probe(API + "/nodes", ANY_USER),
    ("GET", "/api/v1/nodes/{name}"): Probe(API + "/nodes/n1", ANY_USER),
    ("PUT", "/api/v1/nodes/{name}"): Probe(API + "/nodes/n8", ADMIN, {"cpu_milli": 1000}),
    ("PATCH", "/api/v1/nodes/{name}"): Probe(API + "/nodes/n1", ADMIN, {"state": "ready"}),
    ("DELETE", "/api/v1/nodes/{name}"): Probe(API + "/nodes/n9", ADMIN, setup=_node9),
    # node agents: no user may report (only the node's credential: tests/server/test_agents.py)
    ("POST", "/api/v1/nodes/{name}/report"): Probe(API + "/nodes/n1/report", set(), {}),
    ("POST", "/api/v1/nodes/{name}/tokens"): Probe(API + "/nodes/n1/tokens", ADMIN),
    ("GET", "/api/v1/nodes/{name}/tokens"): Probe(API + "/nodes/n1/tokens", ADMIN),
    ("DELETE", "/api/v1/nodes/{name}/tokens/{token_id}"): Probe(
        API + "/nodes/n1/tokens/{tid}", ADMIN, setup=_node_token
    ),
    ("GET", "/api/v1/gpus"): Probe(API + "/gpus", ANY_USER),
    ("GET", "/api/v1/gpus/{uuid}"): Probe(API + "/gpus/GPU-n1-0", ANY_USER),
    ("PATCH", "/api/v1/gpus/{uuid}"): Probe(API + "/gpus/GPU-n1-0", ADMIN, {"sharing": "shared"}),
    ("POST", "/api/v1/workloads"): Probe(API + "/workloads", SUBMITTERS, JOB),
    ("GET", "/api/v1/workloads"): Probe(API + "/workloads", ANY_USER),
    ("GET", "/api/v1/workloads/{workload_id}"): Probe(
        API + "/workloads/{wid}", LAB_READERS, setup=_submit, hides=True
    ),
    ("DELETE", "/api/v1/workloads/{workload_id}"): Probe(
        API + "/workloads/{wid}", SUBMITTERS, setup=_submit, hides=True
    ),
    ("GET", "/api/v1/workloads/{workload_id}/logs"): Probe(
        API + "/workloads/{wid}/logs", SUBMITTERS, setup=_submit, hides=True
    ),
    ("GET", "/api/v1/queue"): Probe(API + "/queue", ANY_USER),
    ("GET", "/api/v1/usage"): Probe(API + "/usage", ANY_USER),
    ("GET", "/api/v1/events"): Probe(API + "/events", ANY_USER),
    ("GET", "/api/v1/usage/chargeback"): Probe(API + "/usage/chargeback", ANY_USER),
    ("GET", "/api/v1/budgets"): Probe(API + "/budgets", ANY_USER),
    ("PUT", "/api/v1/budgets"): Probe(API + "/budgets", ADMIN, {"tenant": "lab", "gpu_hours": 5}),
    ("DELETE", "/api/v1/budgets/{budget_id}"): Probe(API + "/budgets/{bid}", ADMIN, setup=_budget),
    ("GET", "/api/v1/reservations"): Probe(API + "/reservations", ANY_USER),
    ("POST", "/api/v1/reservations"): Probe(API + "/reservations", MANAGERS, BOOKING),
    ("DELETE", "/api/v1/reservations/{reservation_id}"): Probe(
        API + "/reservations/{rid}", MANAGERS, setup=_reservation, hides=True
    ),
    ("GET", "/api/v1/node-pools"): Probe(API + "/node-pools", ANY_USER),
    ("POST", "/api/v1/node-pools"): Probe(
        API + "/node-pools", ADMIN, {"name": "pool2", **POOL_BODY}
    ),
    ("GET", "/api/v1/node-pools/{name}"): Probe(API + "/node-pools/pool1", ANY_USER, setup=_pool),
    ("PATCH", "/api/v1/node-pools/{name}"): Probe(
        API + "/node-pools/pool1", ADMIN, {"max_nodes": 3}, setup=_pool
    ),
    ("DELETE", "/api/v1/node-pools/{name}"): Probe(API + "/node-pools/pool1", ADMIN, setup=_pool),
    ("GET", "/api/v1/profiles"): Probe(API + "/profiles", ANY_USER),
    ("POST", "/api/v1/profiles"): Probe(API + "/profiles", ADMIN, {"name": "p2", "gpus": 1}),
    ("GET", "/api/v1/profiles/{name}"): Probe(API + "/profiles/p1", LAB_READERS, setup=_profile),
    ("PUT", "/api/v1/profiles/{name}"): Probe(
        API + "/profiles/p1", ADMIN, {"gpus": 2}, setup=_profile
    ),
    ("DELETE", "/api/v1/profiles/{name}"): Probe(API + "/profiles/p1", ADMIN, setup=_profile),
    ("GET", "/healthz"): Probe("/healthz", PUBLIC),
    ("GET", "/readyz"): Probe("/readyz", PUBLIC),
    # no user's token: the scrape token only (tests/server/test_metrics_access.py)
    ("GET", "/metrics"): Probe("/metrics", set()),
    # the dashboard (gpupool.web): its data needs a user; its pages and files are public
    ("GET", "/api/v1/dashboard/cluster"): Probe(API + "/dashboard/cluster", ANY_USER),
    ("GET", "/api/v1/dashboard/tenants"): Probe(API + "/dashboard/tenants", ANY_USER),
    ("GET", "/api/v1/dashboard/gpu-history"): Probe(API + "/dashboard/gpu-history", ANY_USER),
    ("GET", "/api/v1/dashboard/hub"): Probe(API + "/dashboard/hub", ANY_USER),
    ("GET", "/"): Probe("/", PUBLIC),
    ("GET", "/favicon.ico"): Probe("/favicon.ico", PUBLIC),
    ("GET", "/dashboard"): Probe("/dashboard", PUBLIC),
    ("GET", "/dashboard/"): Probe("/dashboard/", PUBLIC),
    ("GET", "/dashboard/login"): Probe("/dashboard/login", PUBLIC),
    ("GET", "/dashboard/{slug}"): Probe("/dashboard/cluster", PUBLIC),
    ("GET", "/dashboard/static/{name}"): Probe("/dashboard/static/common.js", PUBLIC),
    ("GET", "/dashboard/vendor/plotly.min.js"): Probe("/dashboard/vendor/plotly.min.js", PUBLIC),
}


def test_policy_lists_every_route(world):
    routes = set(iter_routes(world.app.routes))
    assert routes - set(POLICY) == set(), "add these routes to POLICY with who may call them"
    assert set(POLICY) - routes == set(), "POLICY lists routes the app no longer has"


@pytest.mark.parametrize("role", ROLES)
def test_every_route_allows_exactly_the_listed_roles(world, role):
    wrong = []
    for (method, template), probe in POLICY.items():
        subst = probe.setup(world) if probe.setup else {}
        path = probe.path.format(**subst)
        headers = {}
        if role != "anonymous":
            tok = issue_token(world.ctx, USERS[role], "probe", None).token
            headers = {"Authorization": f"Bearer {tok}"}
        world.client.cookies.clear()
        r = world.client.request(method, path, headers=headers, json=probe.body)
        allowed = r.status_code not in (401, 403)
        if probe.hides and role not in probe.allowed and r.status_code == 404:
            allowed = False  # hidden as if it did not exist
        if r.status_code >= 500:
            wrong.append(f"{method} {template}: {r.status_code} {r.text[:200]}")
        elif allowed != (role in probe.allowed):
            wrong.append(
                f"{method} {template}: {role} got {r.status_code} "
                f"(expected {'allow' if role in probe.allowed else 'deny'}) {r.text[:200]}"
            )
        elif not allowed:
            assert r.headers["content-type"] == "application/problem+json"
        # undo what the probe made, so the next probe starts from the same state
        if method in ("POST", "PUT", "DELETE", "PATCH") and r.status_code < 300:
            _cleanup(world, method, path)
        elif probe.setup is not None:
            _cleanup(world, "DELETE", path)
    assert not wrong, "\n".join(wrong)


def _cleanup(world, method: str, path: str) -> None:
    c = world.client
    h = world.h("admin")
    if path.endswith("/tenants") and method == "POST":
        c.delete(API + "/tenants/lab/new", headers=h)
    elif "/tenants/lab/sub" in path:
        c.delete(API + "/tenants/lab/sub", headers=h)
    elif path.endswith("/users/otto/memberships/lab"):
        c.delete(path, headers=h)
    elif path.endswith("/users/vic/memberships/lab"):
        c.put(path, headers=h, json={"role": "viewer"})
    elif "/node-pools" in path:
        for name in ("pool1", "pool2"):
            c.delete(API + f"/node-pools/{name}", headers=h)
    elif "/profiles" in path:
        for name in ("p1", "p2"):
            c.delete(API + f"/profiles/{name}", headers=h)
    elif path.endswith("/nodes/n8") or path.endswith("/nodes/n9"):
        c.delete(path, headers=h)
    elif path.endswith("/users/ann") and method == "PATCH":
        # a new password revokes ann's other tokens, the fixture's among them
        world.tokens["member"] = issue_token(world.ctx, "ann", "test", None).token
    elif path.endswith("/gpus/GPU-n1-0"):
        c.patch(path, headers=h, json={"sharing": "exclusive"})
    elif "/budgets" in path:
        for b in c.get(API + "/budgets", headers=h).json():
            c.delete(API + f"/budgets/{b['id']}", headers=h)
    elif "/reservations" in path:
        for r in c.get(API + "/reservations", headers=h).json():
            c.delete(API + f"/reservations/{r['id']}", headers=h)
    elif path.endswith("/users") and method == "POST":
        with world.ctx.store.write() as s:
            from gpupool.store.rows import UserRow

            row = s.get(UserRow, "probe-user")
            if row is not None:
                s.delete(row)
