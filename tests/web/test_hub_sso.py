"""Dashboard sign-on through JupyterHub (review F2 and F9 of issue 29): the session cookie
stays under /services/gpupool/ (never on a user's notebook server, /user/<name>/), is Secure
behind TLS, needs the CSRF header for changes, and goes only to the gpupool user whose name
is exactly the hub's."""

from __future__ import annotations

import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from fastapi.testclient import TestClient

from gpupool.domain import User
from gpupool.server.services.accounts import issue_token
from gpupool.store import UserRepo
from tests.web.conftest import build_app
from tests.web.hub_fake import PREFIX, FakeHub, HubLogin, install_fake_hub


@pytest.fixture
def hub_app(tmp_path):
    app, _ = build_app(f"sqlite:///{tmp_path / 'gpupool.db'}", time.time(), gpus=2, workloads=0)
    ctx = app.state.ctx
    with ctx.store.write() as s:  # two users that differ only in case, as before the fix
        for name in ("Dave", "dave"):
            UserRepo(s).create(User(name), None, ctx.clock.now())
    hub = FakeHub()
    install_fake_hub(app, hub)
    return app, hub


def _sign_in(client: TestClient, code: str) -> httpx.Response:
    """Open a dashboard page, follow the sign-on to the callback with `code`; its answer."""
    r = client.get(PREFIX + "/dashboard/cluster", headers={"Accept": "text/html"})
    assert r.status_code == 302 and "/hub/api/oauth2/authorize" in r.headers["location"]
    state = parse_qs(urlparse(r.headers["location"]).query)["state"][0]
    return client.get(PREFIX + "/oauth_callback", params={"code": code, "state": state})


def _session_cookie(r: httpx.Response) -> dict[str, str] | None:
    for header in r.headers.get_list("set-cookie"):
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
        if "gpupool_session" in jar:
            return {k: v for k, v in jar["gpupool_session"].items() if v}
    return None


def _client(app, scheme: str = "http") -> TestClient:
    return TestClient(app, base_url=f"{scheme}://testserver", follow_redirects=False)


def test_sso_cookie_is_scoped_to_the_service_and_never_reaches_user_servers(hub_app):
    app, hub = hub_app
    hub.users["c1"] = HubLogin("ann")
    with _client(app) as c:
        r = _sign_in(c, "c1")
        assert r.status_code == 302 and r.headers["location"] == PREFIX + "/dashboard/cluster"
        cookie = _session_cookie(r)
        assert cookie is not None and cookie["path"] == PREFIX + "/"
        assert cookie["httponly"] and cookie["samesite"].lower() == "lax"
        assert not cookie.get("secure")
        # what the browser sends where, by the cookie's path
        for path, sent in [
            ("/user/ann/lab", False),
            ("/user/mallory/api/contents", False),
            ("/hub/home", False),
            ("/services/gpupool-other/", False),
            (PREFIX + "/api/v1/auth/me", True),
        ]:
            req = c.build_request("GET", path)
            assert ("gpupool_session" in req.headers.get("cookie", "")) is sent, path
        me = c.get(PREFIX + "/api/v1/auth/me")
        assert me.status_code == 200 and me.json()["name"] == "ann"


def test_sso_cookie_is_secure_behind_tls(hub_app):
    app, hub = hub_app
    hub.users["c1"] = HubLogin("ann")
    with _client(app, "https") as c:
        cookie = _session_cookie(_sign_in(c, "c1"))
    assert cookie is not None and cookie["secure"]


def test_sso_session_changes_state_only_with_the_csrf_header(hub_app):
    app, hub = hub_app
    hub.users["c1"] = HubLogin("ann")
    with _client(app) as c:
        assert _sign_in(c, "c1").status_code == 302
        api = PREFIX + "/api/v1"
        refused = c.post(api + "/tokens", json={"name": "stolen"})
        assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["detail"]
        csrf = c.get(api + "/auth/csrf").json()["token"]
        ok = c.post(api + "/tokens", json={"name": "mine"}, headers={"X-CSRF-Token": csrf})
        assert ok.status_code == 201 and ok.json()["user"] == "ann"


def test_sso_refuses_a_hub_name_whose_gpupool_login_was_another_user(hub_app):
    """Before the fix the hub lowercased gpupool's `Dave` to `dave`; the sign-on then gave
    `Dave`'s browser a session as the different user `dave`."""
    app, hub = hub_app
    daves = issue_token(app.state.ctx, "Dave", "jupyterhub-login", None).token
    hub.users["c1"] = HubLogin("dave", {"gpupool_token": daves, "gpupool_user": "Dave"})
    with _client(app) as c:
        r = _sign_in(c, "c1")
        assert r.status_code == 403 and _session_cookie(r) is None
        assert "'dave'" in r.text and "'Dave'" in r.text and "log in again" in r.text
        assert c.get(PREFIX + "/api/v1/auth/me").status_code == 401


def test_sso_without_auth_state_refuses_a_name_two_users_share_but_for_case(hub_app):
    app, hub = hub_app
    hub.users["c1"] = HubLogin("dave")
    with _client(app) as c:
        r = _sign_in(c, "c1")
    assert r.status_code == 403 and _session_cookie(r) is None
    assert "Dave, dave" in r.text


def test_sso_with_matching_auth_state_signs_in_the_exact_user(hub_app):
    app, hub = hub_app
    daves = issue_token(app.state.ctx, "dave", "jupyterhub-login", None).token
    hub.users["c1"] = HubLogin("dave", {"gpupool_token": daves})
    with _client(app) as c:
        assert _session_cookie(_sign_in(c, "c1")) is not None
        assert c.get(PREFIX + "/api/v1/auth/me").json()["name"] == "dave"


def test_sso_refuses_a_hub_name_gpupool_has_only_in_another_case(hub_app):
    app, hub = hub_app
    hub.users["c1"] = HubLogin("ANN")
    with _client(app) as c:
        r = _sign_in(c, "c1")
    assert r.status_code == 403 and _session_cookie(r) is None
    assert "no gpupool account of exactly that name" in r.text
