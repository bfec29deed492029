"""No existence oracle (review F10): a caller learns nothing about users, tenants and
workloads it may not see. For each route, something that exists but is hidden from the
caller and something that does not exist get the same status and the same body but for the
name asked for."""

from __future__ import annotations

import pytest

from gpupool.domain import User
from gpupool.server.services.accounts import issue_token
from gpupool.store import UserRepo
from tests.server.conftest import API, password_hash


@pytest.fixture
def nora(world):
    """Headers of nora, a user with no role anywhere."""
    with world.ctx.store.write() as s:
        UserRepo(s).create(User("nora"), password_hash(), world.clock.now())
    return {"Authorization": f"Bearer {issue_token(world.ctx, 'nora', 't', None).token}"}


def _same(world, headers, method: str, hidden: str, missing: str, body=None) -> int:
    """Ask for `hidden` and for `missing` (paths that differ in one name); both answers must
    be the same but for that name. Returns the status."""
    differ = [(a, b) for a, b in zip(hidden.split("/"), missing.split("/"), strict=True) if a != b]
    answers = []
    for path, name in zip((hidden, missing), differ[0], strict=True):
        r = world.client.request(method, API + path, headers=headers, json=body)
        answers.append((r.status_code, r.text.replace(name, "NAME")))
    assert answers[0] == answers[1], f"{method} {hidden} vs {missing}: {answers}"
    return answers[0][0]


@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_a_user_without_roles_cannot_tell_whether_a_user_exists(world, nora, method):
    body = {"password": "a new long password"} if method == "PATCH" else None
    assert _same(world, nora, method, "/users/ann", "/users/no-such-user", body) == 404
    assert _same(world, nora, method, "/users/root", "/users/no-such-user", body) == 404


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
def test_a_user_without_roles_cannot_tell_whether_a_tenant_exists(world, nora, method):
    body = {"idle_timeout_s": 600} if method == "PATCH" else None
    assert world.post("admin", "/tenants", json={"name": "lab/sub"}).status_code == 201
    assert _same(world, nora, method, "/tenants/lab", "/tenants/nosuch", body) == 404
    assert _same(world, nora, method, "/tenants/lab/sub", "/tenants/lab/nosuch", body) == 404


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_memberships_do_not_tell_whether_a_hidden_tenant_exists(world, nora, method):
    body = {"role": "viewer"} if method == "PUT" else None
    hidden, missing = "/users/nora/memberships/lab", "/users/nora/memberships/nosuch"
    assert _same(world, nora, method, hidden, missing, body) == 404
    # a member of lab may see lab: refused for its role, before anything is read
    other = "/users/ann/memberships/lab/nosuch"
    assert (
        world.client.request(method, API + other, headers=world.h("member"), json=body).status_code
        == 403
    )


def test_a_tenant_admin_sees_its_members_but_not_other_users(world):
    assert world.get("tenant-admin", "/users/ann").status_code == 200
    a = world.get("tenant-admin", "/users/otto")
    b = world.get("tenant-admin", "/users/nobody")
    assert a.status_code == b.status_code == 404
    assert a.json()["detail"].replace("otto", "X") == b.json()["detail"].replace("nobody", "X")


@pytest.mark.parametrize("suffix", ["", "/logs"])
def test_another_tenants_workload_is_a_404_like_a_missing_one(world, suffix):
    wid = world.submit("member", gpus=1)["id"]
    missing = "w-" + "0" * (len(wid) - 2)
    outsider = world.h("outsider")
    assert (
        _same(world, outsider, "GET", f"/workloads/{wid}{suffix}", f"/workloads/{missing}{suffix}")
        == 404
    )
    if not suffix:
        assert _same(world, outsider, "DELETE", f"/workloads/{wid}", f"/workloads/{missing}") == 404
    # its owner still reads it
    assert world.get("member", f"/workloads/{wid}{suffix}").status_code == 200


def test_another_users_token_answers_as_a_missing_one(world, nora):
    tid = issue_token(world.ctx, "ann", "t", None).id
    assert _same(world, nora, "DELETE", f"/tokens/{tid}", "/tokens/no-such-token") == 404
    assert world.client.get(API + "/auth/me", headers=world.h("member")).status_code == 200
