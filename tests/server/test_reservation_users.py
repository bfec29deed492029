"""A reservation for some users takes only users of its tenant (a role on it, on a tenant
below it, or on one above it; exact paths), and tells a tenant-admin nothing about users
outside their tenants: "no such user" and "a user of another tenant" get the same answer."""

from __future__ import annotations

import pytest

from gpupool.domain import Membership, Role, User
from gpupool.store import UserRepo
from tests.server.conftest import password_hash

HOUR = 3600.0


def _book(world, role: str, users: list[str], tenant: str = "lab"):
    now = world.clock.now()
    body = {"tenant": tenant, "gpus": 1, "start": now + HOUR, "end": now + 2 * HOUR}
    r = world.post(role, "/reservations", json={**body, "users": users})
    if r.status_code == 201:  # leave the window free for the next booking
        assert world.delete("admin", f"/reservations/{r.json()['id']}").status_code == 204
    return r


def _add_user(world, name: str, tenant: str, role: Role = Role.MEMBER) -> None:
    with world.ctx.store.write() as s:
        UserRepo(s).create(User(name), password_hash(), world.clock.now())
        UserRepo(s).set_membership(Membership(name, tenant, role))


@pytest.fixture
def tenants(world):
    for name in ("lab/sub", "labx"):  # a tenant below lab, and one whose name starts with it
        assert world.post("admin", "/tenants", json={"name": name}).status_code == 201
    _add_user(world, "sam", "lab/sub")
    _add_user(world, "lex", "labx")
    return world


@pytest.mark.parametrize("role", ["tenant-admin", "admin"])
def test_no_such_user_and_another_tenants_user_get_the_same_answer(tenants, role):
    w = tenants
    answers = {}
    for name in ("otto", "no-such-user", "lex"):  # other's member, nobody, labx's member
        r = _book(w, role, ["ann", name])
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        answers[name] = r.text.replace(name, "NAME")
    assert answers["otto"] == answers["no-such-user"] == answers["lex"]
    detail = _book(w, role, ["no-such-user"]).json()["detail"]
    assert "not a user of tenant lab" in detail and "gpupool user add-to-tenant" in detail


def test_users_with_a_role_in_the_tenant_its_subtree_or_above_are_taken(tenants):
    w = tenants
    for users in (["ann"], ["vic"], ["tina", "ann"], ["sam"]):  # sam: a member of lab/sub
        r = _book(w, "tenant-admin", users)
        assert r.status_code == 201, (users, r.text)
        assert r.json()["users"] == users
    # a role on lab reaches down: ann may be booked on lab/sub; otto (other) may not
    r = _book(w, "admin", ["ann"], tenant="lab/sub")
    assert r.status_code == 201, r.text
    assert "not a user" in _book(w, "admin", ["otto"], tenant="lab/sub").text
    # exact paths: labx's member is no user of lab, nor lab's of labx
    assert "not a user" in _book(w, "admin", ["lex"]).text
    assert "not a user" in _book(w, "admin", ["ann"], tenant="labx").text
