"""A stand-in for JupyterHub's side of the dashboard sign-on (`gpupool.web.hub_sso`): its OAuth
token endpoint and user API over an `httpx.MockTransport`, and its authorize page as a route
of the served app (so a browser follows the whole sign-on on one origin).

`FakeHub.users` maps an OAuth code to the hub user it signs in: the hub's name and, where the
hub lets the service read it, the auth_state (None: the hub answers 403 for it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

import httpx

from gpupool.web.hub_sso import SSOSettings, install_hub_sso

HUB_API = "http://hub.test/hub/api"
SECRET = "service-secret-for-tests"
PREFIX = "/services/gpupool"


@dataclass
class HubLogin:
    name: str
    auth_state: dict | None = None


@dataclass
class FakeHub:
    users: dict[str, HubLogin] = field(default_factory=dict)
    #: the code the browser's next authorize request is answered with
    next_code: str = ""

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/hub/api")
        auth = request.headers.get("authorization", "")
        if path == "/oauth2/token" and request.method == "POST":
            form = parse_qs(request.content.decode())
            if form.get("client_secret") != [SECRET] or form["code"][0] not in self.users:
                return httpx.Response(400, json={"error": "invalid_grant"})
            return httpx.Response(200, json={"access_token": "hub-" + form["code"][0]})
        if path == "/user" and auth.startswith("token hub-"):
            return httpx.Response(200, json={"name": self.users[auth[10:]].name})
        if path.startswith("/users/") and auth == f"token {SECRET}":
            for login in self.users.values():
                if path == f"/users/{login.name}":
                    if login.auth_state is None:
                        return httpx.Response(403, json={"message": "not allowed"})
                    return httpx.Response(
                        200, json={"name": login.name, "auth_state": login.auth_state}
                    )
            return httpx.Response(404, json={"message": "no such user"})
        return httpx.Response(403, json={"message": f"fake hub: {request.method} {path}"})


def install_fake_hub(app, hub: FakeHub) -> None:
    """Sign-on in front of `app` against `hub`, and the hub's authorize page on `app` itself:
    it sends the browser straight back to the callback with `hub.next_code`."""
    from fastapi.responses import RedirectResponse

    sso = SSOSettings(HUB_API, SECRET, transport=httpx.MockTransport(hub.handle))

    def authorize(redirect_uri: str, state: str) -> RedirectResponse:
        return RedirectResponse(
            f"{redirect_uri}?{urlencode({'code': hub.next_code, 'state': state})}"
        )

    app.add_api_route("/hub/api/oauth2/authorize", authorize, methods=["GET"])
    install_hub_sso(app, sso)
