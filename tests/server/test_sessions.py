"""The dashboard's session cookie (review F2, F9 of issue 29): scoped to gpupool's own path,
Secure behind TLS, a CSRF token for cookie-authenticated state changes, and user names that
differ only in case refused."""

from __future__ import annotations

from http.cookies import SimpleCookie

from fastapi.testclient import TestClient

from tests.server.conftest import API, PASSWORD


def _session_cookie(response) -> dict[str, str | bool]:
    """The attributes of the gpupool_session cookie a response sets (lower-case keys)."""
    for header in response.headers.get_list("set-cookie"):
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
        if "gpupool_session" in jar:
            morsel = jar["gpupool_session"]
            return {k: morsel[k] for k in morsel if morsel[k]} | {"value": morsel.value}
    raise AssertionError(f"no gpupool_session cookie set: {response.headers}")


def _login(client, user: str = "ann"):
    r = client.post(API + "/auth/login", json={"username": user, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return r


def test_login_cookie_stays_on_the_api_path_never_slash(world):
    cookie = _session_cookie(_login(world.client))
    # Not "/": cookies ignore ports, so a hub on the same host would get it under /user/...
    assert cookie["path"] == "/api/v1/"
    assert cookie["httponly"] and cookie["samesite"].lower() == "lax"
    assert not cookie.get("secure")  # plain http, GPUPOOL_COOKIE_SECURE off


def test_login_cookie_is_secure_when_the_request_came_over_https(world):
    with TestClient(world.app, base_url="https://testserver") as tls:
        cookie = _session_cookie(_login(tls))
    assert cookie["secure"] and cookie["path"] == "/api/v1/"


def test_cookie_only_state_change_needs_the_csrf_header(world):
    c = world.client
    _login(c)
    refused = c.post(API + "/tokens", json={"name": "from-a-cookie"})
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/problem+json"
    assert "X-CSRF-Token" in refused.json()["detail"]
    assert "GET /api/v1/auth/csrf" in refused.json()["detail"]
    wrong = c.post(API + "/tokens", json={"name": "x"}, headers={"X-CSRF-Token": "0" * 64})
    assert wrong.status_code == 403
    got = c.get(API + "/auth/csrf")
    assert got.status_code == 200 and got.json()["header"] == "X-CSRF-Token"
    ok = c.post(API + "/tokens", json={"name": "x"}, headers={"X-CSRF-Token": got.json()["token"]})
    assert ok.status_code == 201, ok.text
    assert c.get(API + "/auth/me").status_code == 200  # reads need no token


def test_csrf_token_is_bound_to_its_session(world):
    c = world.client
    _login(c, "ann")
    anns = c.get(API + "/auth/csrf").json()["token"]
    c.cookies.clear()
    _login(c, "vic")
    r = c.post(API + "/tokens", json={"name": "x"}, headers={"X-CSRF-Token": anns})
    assert r.status_code == 403


def test_bearer_requests_need_no_csrf_token(world):
    c = world.client
    c.cookies.clear()
    r = c.post(API + "/tokens", json={"name": "cli"}, headers=world.h("member"))
    assert r.status_code == 201, r.text


def test_logout_with_the_cookie_needs_the_token_and_clears_the_cookie(world):
    c = world.client
    _login(c)
    assert c.post(API + "/auth/logout").status_code == 403
    csrf = c.get(API + "/auth/csrf").json()["token"]
    out = c.post(API + "/auth/logout", headers={"X-CSRF-Token": csrf})
    assert out.status_code == 200
    paths = {_attrs(h)["path"] for h in out.headers.get_list("set-cookie")}
    assert paths == {"/api/v1/", "/"}  # this cookie, and one an older release set at "/"
    assert c.get(API + "/auth/me").status_code == 401


def _attrs(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    jar.load(header)
    return dict(jar["gpupool_session"])


def test_user_names_that_differ_only_in_case_are_refused(world):
    r = world.post("admin", "/users", json={"name": "Dave", "password": "x" * 12})
    assert r.status_code == 201, r.text
    r = world.post("admin", "/users", json={"name": "dave", "password": "x" * 12})
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert "'Dave'" in r.json()["detail"] and "case" in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "name"
    r = world.post("admin", "/users", json={"name": "DAVE"})
    assert r.status_code == 422
    assert world.post("admin", "/users", json={"name": "Dave"}).status_code == 409
    assert world.get("admin", "/users/dave").status_code in (403, 404)
    assert world.post("admin", "/users", json={"name": "david"}).status_code == 201
