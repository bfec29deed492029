"""Bad input gets a 4xx problem+json that says what to change, never a 5xx, and changes
nothing."""

from __future__ import annotations

import pytest

from tests.server.conftest import API


def _state(world) -> tuple:
    with world.ctx.store.read() as s:
        from sqlalchemy import func, select

        from gpupool.store.rows import EventRow, TenantRow, WorkloadRow

        return (
            s.scalar(select(func.count()).select_from(WorkloadRow)),
            s.scalar(select(func.count()).select_from(EventRow)),
            s.scalar(select(func.count()).select_from(TenantRow)),
        )


def _problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert {"type", "title", "status", "detail"} <= set(body) and body["status"] == status
    return body


CASES = [
    # (name, json body or raw bytes, status, words the detail must contain)
    ("malformed json", b'{"gpus": 1,', 400, "not valid JSON"),
    ("wrong type", {"gpus": "two", "command": ["x"]}, 422, "gpus"),
    ("unknown field", {"gpus": 1, "command": ["x"], "gpu": 2}, 422, "unknown field"),
    ("negative", {"gpus": -1, "command": ["x"]}, 422, "gpus"),
    ("both gpus and fraction", {"gpus": 1, "gpu_fraction": 0.5, "command": ["x"]}, 422, "not both"),
    ("fraction of 1", {"gpu_fraction": 1, "command": ["x"]}, 422, "gpu_fraction"),
    ("beyond any node", {"gpus": 8, "command": ["x"]}, 422, "the most any node has is 4"),
    ("beyond the limit", {"gpus": 4, "command": ["x"]}, 422, "lab's limit is 3 GPUs"),
    ("unknown model", {"gpus": 1, "gpu_model": "B200", "command": ["x"]}, 422, "B200"),
    (
        "too much gpu memory",
        {"gpu_fraction": 0.5, "gpu_memory_mib": 999999, "command": ["x"]},
        422,
        "the largest shared GPU has 80 GiB",
    ),
    ("unknown tenant", {"tenant": "nope", "gpus": 1, "command": ["x"]}, 422, "unknown tenant"),
    ("job without command", {"gpus": 1}, 422, "needs a command"),
    ("not an object", [1, 2, 3], 422, "body"),
    ("unknown profile", {"profile": "huge", "command": ["x"]}, 422, "no profile"),
]


@pytest.mark.parametrize("name,body,status,words", CASES, ids=[c[0] for c in CASES])
def test_bad_submissions_are_refused_and_change_nothing(world, name, body, status, words):
    before = _state(world)
    kw = {"content": body, "headers": {**world.h("member"), "content-type": "application/json"}}
    if not isinstance(body, bytes):
        kw = {"json": body, "headers": world.h("member")}
    r = world.client.post(API + "/workloads", **kw)
    p = _problem(r, status)
    assert words in p["detail"], p
    if status == 422 and "errors" in p and p["errors"]:
        assert all("field" in e and "message" in e for e in p["errors"])
    assert _state(world) == before


def test_validation_errors_name_the_field_path(world):
    r = world.post("admin", "/tenants", json={"name": "x", "quota": {"limit": "lots"}})
    p = _problem(r, 422)
    assert p["errors"][0]["field"] == "body.quota.limit"


def test_oversized_bodies_get_413(world):
    before = _state(world)
    big = {"gpus": 1, "command": ["x" * 100_000]}
    r = world.post("member", "/workloads", json=big)
    assert "larger than" in _problem(r, 413)["detail"]

    def chunks():
        yield b'{"gpus": 1, "command": ["'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"]}'

    r = world.client.post(
        API + "/workloads",
        content=chunks(),
        headers={**world.h("member"), "content-type": "application/json"},
    )
    _problem(r, 413)
    assert _state(world) == before


def test_unknown_routes_and_methods(world):
    assert "no such endpoint" in _problem(world.get("member", "/nothing"), 404)["detail"]
    r = world.client.put(API + "/queue", headers=world.h("member"))
    _problem(r, 405)
    _problem(world.get("member", "/workloads/w-doesnotexist"), 404)
    _problem(world.get("admin", "/tenants/ghost"), 404)
    _problem(world.patch("admin", "/gpus/GPU-nope", json={"sharing": "shared"}), 404)


def test_missing_or_bad_credentials(world):
    p = _problem(world.client.get(API + "/workloads"), 401)
    assert "Bearer" in p["detail"]
    r = world.client.get(API + "/workloads", headers={"Authorization": "Bearer gp_forged"})
    _problem(r, 401)


def test_invalid_tenant_changes_leave_the_tree_as_it_was(world):
    before = world.get("admin", "/tenants").json()
    r = world.post("admin", "/tenants", json={"name": "lab/a", "quota": {"guaranteed": 5}})
    assert r.status_code == 422 and "limit" in r.json()["detail"]
    r = world.post("admin", "/tenants", json={"name": "bad name!"})
    _problem(r, 422)
    r = world.post("admin", "/tenants", json={"name": "lab"})
    _problem(r, 409)
    assert world.get("admin", "/tenants").json() == before


def test_subtenant_of_a_tenant_with_work_is_refused(world):
    world.submit(gpus=1)
    r = world.post("admin", "/tenants", json={"name": "lab/child"})
    assert "only leaf tenants hold work" in _problem(r, 409)["detail"]
