"""Single sign-on from JupyterHub into the gpupool dashboard (the hub is the OAuth provider).

The hub lists the dashboard in its Services menu as the service ``gpupool`` and proxies
``/services/gpupool/...`` to the gpupool server, which serves its dashboard there too
(`gpupool.web.ServePrefix`). `HubSSO`, an ASGI middleware in front of it:

1. a page request under ``/services/gpupool/`` without a valid gpupool session goes to the
   hub's ``/hub/api/oauth2/authorize`` (no confirmation page: the service is
   ``oauth_no_confirm``);
2. ``/services/gpupool/oauth_callback`` trades the code for a hub token, asks the hub who the
   user is, issues a gpupool session (cookie) for the gpupool user of exactly the same name,
   and returns to the page first asked for. A hub user gpupool does not know gets a 403 page
   that says so. API calls are never redirected (they get the API's own 401).

Names map exactly (no case folding): where the hub lets this service read the user's
auth_state (`GpupoolAuthenticator` keeps the gpupool login's token there), the gpupool user
that token belongs to must be the hub user's name exactly; without auth_state, a name that
two gpupool users share but for case is refused. The session cookie is scoped to
``/services/gpupool/`` (never ``/``: the hub serves users' notebook servers on the same
origin, under ``/user/<name>/``), HttpOnly, SameSite=Lax, and Secure behind TLS.

`install_hub_sso(app, sso)` adds it (and ServePrefix). The client secret is the service's
api_token, shared with the hub through ``GPUPOOL_HUB_SERVICE_SECRET``
(`gpupool.server.hub.config.service_secret`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gpupool.domain import DomainError
from gpupool.server.hub.config import DASHBOARD_SERVICE

STATE_COOKIE = "gpupool-hub-oauth-state"


@dataclass(frozen=True, slots=True)
class SSOSettings:
    """hub_api_url: the hub's API as this server reaches it (``http://127.0.0.1:8081/hub/api``).
    client_secret: the dashboard service's api_token. public_port: the hub's public port
    (the dashboard links to its spawn page there when not served through the hub)."""

    hub_api_url: str
    client_secret: str
    public_port: int | None = None
    service: str = DASHBOARD_SERVICE
    hub_prefix: str = "/hub/"
    session_ttl_s: float = 12 * 3600.0
    #: how this server talks to the hub's API (tests pass an httpx.MockTransport)
    transport: httpx.AsyncBaseTransport | None = None

    @property
    def prefix(self) -> str:
        return f"/services/{self.service}"

    @property
    def client_id(self) -> str:
        return f"service-{self.service}"

    @property
    def redirect_uri(self) -> str:
        return f"{self.prefix}/oauth_callback"

    @property
    def cookie_path(self) -> str:
        """The session cookie's path: this service's prefix and nothing else on the hub."""
        return f"{self.prefix}/"


@dataclass(frozen=True, slots=True)
class HubUser:
    """Who the hub says signed in. gpupool_token: the token of the user's gpupool login, from
    the hub's auth_state, where the hub lets this service read it (else None)."""

    name: str
    gpupool_token: str | None = None


def _page(status: int, text: str) -> HTMLResponse:
    body = (
        "<!doctype html><title>gpupool</title>"
        f'<p id="gpupool-sso-error">{text}</p><p><a href="/hub/home">Back to JupyterHub</a></p>'
    )
    return HTMLResponse(body, status_code=status)


class HubSSO:
    """ASGI middleware: sign hub users in to gpupool (see the module docstring)."""

    def __init__(self, app: ASGIApp, sso: SSOSettings) -> None:
        self.app = app
        self.sso = sso

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._under_prefix(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if scope["path"] == self.sso.redirect_uri:
            response = await self._callback(request)
        elif self._wants_sign_in(request):
            response = self._authorize(request)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)

    def _under_prefix(self, path: str) -> bool:
        return path == self.sso.prefix or path.startswith(self.sso.prefix + "/")

    def _ctx(self, request: Request) -> Any:
        return request.app.state.ctx

    def _session_ok(self, request: Request) -> bool:
        from gpupool.server.auth import principal_for_token

        ctx = self._ctx(request)
        secret = request.cookies.get(ctx.settings.cookie_name)
        if not secret:
            return False
        try:
            principal_for_token(ctx, secret)
        except DomainError:
            return False
        return True

    def _wants_sign_in(self, request: Request) -> bool:
        """A browser navigating to a page (not an API call) without a valid session."""
        if request.method != "GET" or "text/html" not in request.headers.get("accept", ""):
            return False
        return not self._session_ok(request)

    def _authorize(self, request: Request) -> Response:
        state = secrets.token_urlsafe(24)
        query = urlencode(
            {
                "client_id": self.sso.client_id,
                "redirect_uri": self.sso.redirect_uri,
                "response_type": "code",
                "state": state,
            }
        )
        resp = RedirectResponse(f"{self.sso.hub_prefix}api/oauth2/authorize?{query}", 302)
        nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        resp.set_cookie(
            STATE_COOKIE, f"{state}|{nxt}", httponly=True, samesite="lax", path=self.sso.prefix
        )
        return resp

    async def _callback(self, request: Request) -> Response:
        code, state = request.query_params.get("code"), request.query_params.get("state")
        expected, _, nxt = request.cookies.get(STATE_COOKIE, "").partition("|")
        if not code or not state or not expected or not secrets.compare_digest(state, expected):
            return _page(400, "The sign-in link is stale or incomplete; open gpupool again.")
        if not nxt.startswith(self.sso.cookie_path) or nxt.startswith(self.sso.redirect_uri):
            nxt = self.sso.cookie_path  # the session cookie covers only paths under it
        try:
            hub_user = await self._hub_user(code)
        except (httpx.HTTPError, KeyError, ValueError) as e:
            return _page(502, f"JupyterHub did not confirm who you are ({type(e).__name__}).")
        from gpupool.server.auth import cookie_secure
        from gpupool.server.services.accounts import issue_token

        ctx = self._ctx(request)
        refusal = self._refusal(ctx, hub_user)
        if refusal is not None:
            return _page(403, refusal)
        session = issue_token(ctx, hub_user.name, "jupyterhub-sso", self.sso.session_ttl_s)
        resp = RedirectResponse(nxt, 302)
        resp.set_cookie(
            ctx.settings.cookie_name,
            session.token,
            max_age=int(self.sso.session_ttl_s),
            httponly=True,
            samesite="lax",
            secure=cookie_secure(request, ctx),
            path=self.sso.cookie_path,
        )
        resp.delete_cookie(STATE_COOKIE, path=self.sso.prefix)
        return resp

    def _refusal(self, ctx: Any, hub_user: HubUser) -> str | None:
        """Why `hub_user` gets no session (None: a session for the gpupool user of exactly
        that name)."""
        from gpupool.server.security import hash_token
        from gpupool.store import TokenRepo, UserRepo

        name = hub_user.name
        with ctx.store.read() as s:
            users = UserRepo(s)
            known = users.find(name) is not None
            same_but_case = users.names_ignoring_case(name)
            owner = None
            if hub_user.gpupool_token:
                tok = TokenRepo(s).by_hash(hash_token(hub_user.gpupool_token))
                owner = tok.user if tok is not None else None
        if not known:
            return (
                f"JupyterHub user {name!r} has no gpupool account of exactly that name; ask a "
                "gpupool admin to create one with the same name."
            )
        if owner is not None:
            if owner != name:
                return (
                    f"JupyterHub user {name!r} signed in to the hub as gpupool user {owner!r}: "
                    "the names differ, so no gpupool session is given. Log out of JupyterHub "
                    "and log in again with your gpupool user name as it is spelled in gpupool."
                )
            return None
        if len(same_but_case) > 1:
            return (
                f"gpupool has several users named {name!r} but for upper and lower case "
                f"({', '.join(same_but_case)}), so the hub's name does not say which one you "
                "are; ask a gpupool admin to rename or disable all but one."
            )
        return None

    async def _hub_user(self, code: str) -> HubUser:
        async with httpx.AsyncClient(timeout=10, transport=self.sso.transport) as http:
            tok = await http.post(
                f"{self.sso.hub_api_url}/oauth2/token",
                data={
                    "client_id": self.sso.client_id,
                    "client_secret": self.sso.client_secret,
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": self.sso.redirect_uri,
                },
            )
            tok.raise_for_status()
            who = await http.get(
                f"{self.sso.hub_api_url}/user",
                headers={"Authorization": f"token {tok.json()['access_token']}"},
            )
            who.raise_for_status()
            name = str(who.json()["name"])
            # The user's auth_state, where the hub's roles let this service read it
            # (admin:auth_state); a 403 or no auth_state leaves the name alone to go by.
            full = await http.get(
                f"{self.sso.hub_api_url}/users/{quote(name, safe='')}",
                headers={"Authorization": f"token {self.sso.client_secret}"},
            )
            state = full.json().get("auth_state") if full.status_code == 200 else None
            token = state.get("gpupool_token") if isinstance(state, dict) else None
            return HubUser(name, str(token) if token else None)


def install_hub_sso(app: Any, sso: SSOSettings) -> None:
    """Serve the app under the hub's service prefix too, with hub sign-on in front; the
    dashboard finds the hub through ``app.state.hub_sso`` (`gpupool.web.api`, /dashboard/hub)."""
    from gpupool.web.prefix import ServePrefix

    app.state.hub_sso = sso

    app.add_middleware(ServePrefix, prefix=sso.prefix)
    app.add_middleware(HubSSO, sso=sso)
