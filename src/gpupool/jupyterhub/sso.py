"""Single sign-on from JupyterHub into the gpupool dashboard (the hub's OAuth provider).

The hub lists the dashboard in its Services menu as the service ``gpupool`` and proxies
``/services/gpupool/`` to the gpupool server. `create_sso_router` answers there:

1. ``GET /services/gpupool/`` sends the browser to the hub's ``/hub/api/oauth2/authorize``
   (no confirmation page: the service is ``oauth_no_confirm``);
2. ``GET /services/gpupool/oauth_callback`` trades the code for a hub token, asks the hub
   who the user is, issues a gpupool session for the gpupool user of the same name, and
   redirects to the dashboard. A hub user gpupool does not know gets a 403 that says so.

The server includes the router when it runs beside a hub (`gpupool up` does); the client
secret is the service's api_token, shared through ``GPUPOOL_HUB_SERVICE_SECRET``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpupool.jupyterhub.config import DASHBOARD_SERVICE
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.services.accounts import issue_token
from gpupool.store import UserRepo

STATE_COOKIE = "gpupool-hub-oauth-state"


@dataclass(frozen=True, slots=True)
class SSOSettings:
    """hub_api_url: the hub's API as this server reaches it (``http://127.0.0.1:8081/hub/api``).
    client_secret: the service's api_token. dashboard_url: where to land once signed in
    (absolute when the dashboard is on another port than the hub)."""

    hub_api_url: str
    client_secret: str
    dashboard_url: str = "/dashboard/"
    service: str = DASHBOARD_SERVICE
    hub_prefix: str = "/hub/"
    session_ttl_s: float = 12 * 3600.0

    @property
    def prefix(self) -> str:
        return f"/services/{self.service}"

    @property
    def client_id(self) -> str:
        return f"service-{self.service}"

    @property
    def redirect_uri(self) -> str:
        return f"{self.prefix}/oauth_callback"


def _page(status: int, text: str) -> HTMLResponse:
    body = (
        "<!doctype html><title>gpupool</title>"
        f'<p id="gpupool-sso-error">{text}</p><p><a href="/hub/home">Back to JupyterHub</a></p>'
    )
    return HTMLResponse(body, status_code=status)


def create_sso_router(sso: SSOSettings) -> APIRouter:
    """The two routes above, under ``/services/<service>``."""
    router = APIRouter(prefix=sso.prefix, include_in_schema=False)

    @router.get("/")
    def start(request: Request) -> Response:
        state = secrets.token_urlsafe(24)
        query = urlencode(
            {
                "client_id": sso.client_id,
                "redirect_uri": sso.redirect_uri,
                "response_type": "code",
                "state": state,
            }
        )
        resp = RedirectResponse(f"{sso.hub_prefix}api/oauth2/authorize?{query}", 302)
        resp.set_cookie(STATE_COOKIE, state, httponly=True, samesite="lax", path=sso.prefix)
        return resp

    @router.get("/oauth_callback")
    async def callback(
        request: Request,
        code: str | None = None,
        state: str | None = None,
        ctx: AppContext = Depends(get_ctx),
    ) -> Response:
        expected = request.cookies.get(STATE_COOKIE)
        if not code or not state or not expected or not secrets.compare_digest(state, expected):
            return _page(400, "The sign-in link is stale or incomplete; open gpupool again.")
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                tok = await http.post(
                    f"{sso.hub_api_url}/oauth2/token",
                    data={
                        "client_id": sso.client_id,
                        "client_secret": sso.client_secret,
                        "grant_type": "authorization_code",
                        "code": code,
                        "redirect_uri": sso.redirect_uri,
                    },
                )
                tok.raise_for_status()
                who = await http.get(
                    f"{sso.hub_api_url}/user",
                    headers={"Authorization": f"token {tok.json()['access_token']}"},
                )
                who.raise_for_status()
                name = str(who.json()["name"])
        except (httpx.HTTPError, KeyError, ValueError) as e:
            return _page(502, f"JupyterHub did not confirm who you are ({type(e).__name__}).")
        with ctx.store.read() as s:
            known = UserRepo(s).find(name) is not None
        if not known:
            return _page(
                403,
                f"JupyterHub user {name!r} has no gpupool account; ask a gpupool admin to "
                "create one with the same name.",
            )
        session = issue_token(ctx, name, "jupyterhub-sso", sso.session_ttl_s)
        resp = RedirectResponse(sso.dashboard_url, 302)
        resp.set_cookie(
            ctx.settings.cookie_name,
            session.token,
            max_age=int(sso.session_ttl_s),
            httponly=True,
            samesite="lax",
            secure=ctx.settings.cookie_secure,
            path="/",
        )
        resp.delete_cookie(STATE_COOKIE, path=sso.prefix)
        return resp

    return router
