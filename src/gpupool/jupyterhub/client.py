"""The hub side's client of the gpupool REST API (``/api/v1``), async, on httpx.

Errors come back as `GpupoolAPIError` carrying the server's problem+json `detail` (a message
that says what to change), so the spawner and authenticator can show it to the user as is.
`GpupoolUnavailable` means the server could not be reached at all.
"""

from __future__ import annotations

from typing import Any

import httpx


class GpupoolAPIError(Exception):
    """The gpupool server refused a request. `status` is the HTTP status."""

    def __init__(self, status: int, message: str, title: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


class GpupoolUnavailable(GpupoolAPIError):
    """The gpupool server did not answer."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(
            503,
            f"the gpupool server at {url} is not reachable ({why}); "
            "check that gpupool is running, then try again",
        )


def _message(resp: httpx.Response) -> tuple[str, str]:
    try:
        body = resp.json()
    except ValueError:
        return (resp.text.strip()[:300] or resp.reason_phrase), ""
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or body), str(body.get("title", ""))
    return str(body), ""


class GpupoolClient:
    """Calls the gpupool API with one bearer token. Cheap to create; share one per token."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._http = httpx.AsyncClient(
            base_url=self.base_url + "/api/v1",
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}"} if token else {},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def with_token(self, token: str) -> GpupoolClient:
        return GpupoolClient(self.base_url, token, timeout=self._http.timeout.read or 10.0)

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise GpupoolUnavailable(self.base_url, str(e) or type(e).__name__) from None
        if resp.status_code >= 400:
            msg, title = _message(resp)
            raise GpupoolAPIError(resp.status_code, msg, title)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    # -- identity ------------------------------------------------------------------------
    async def login(
        self,
        username: str,
        password: str,
        token_name: str = "jupyterhub",
        client: str | None = None,
    ) -> dict:
        """POST /auth/login -> {token, token_id, expires_at, user: {name, admin, ...}}.
        `client`: the address of the person logging in (gpupool throttles failed logins per
        address; without it, every hub login would count against the hub's own)."""
        return await self._call(
            "POST",
            "/auth/login",
            json={"username": username, "password": password, "token_name": token_name},
            headers={"X-Forwarded-For": client} if client else None,
        )

    async def me(self) -> dict:
        return await self._call("GET", "/auth/me")

    async def user(self, name: str) -> dict:
        return await self._call("GET", f"/users/{name}")

    async def create_token_for(self, user: str, name: str, expires_in_s: float) -> dict:
        """An admin mints a token for `user` (the hub acts for its users with it)."""
        return await self._call(
            "POST", "/tokens", json={"user": user, "name": name, "expires_in_s": expires_in_s}
        )

    async def revoke_token(self, token_id: str) -> None:
        await self._call("DELETE", f"/tokens/{token_id}")

    # -- what can be asked for -----------------------------------------------------------
    async def profiles(self) -> list[dict]:
        return await self._call("GET", "/profiles")

    async def tenants(self) -> list[dict]:
        return await self._call("GET", "/tenants")

    async def gpus(self) -> list[dict]:
        return await self._call("GET", "/gpus")

    # -- workloads -----------------------------------------------------------------------
    async def submit(self, body: dict, service_token: str | None = None) -> dict:
        """POST the workload; `service_token` (the hub's admin token) vouches for a
        `pod_spec` in it (X-Gpupool-Service-Token)."""
        headers = {"X-Gpupool-Service-Token": service_token} if service_token else None
        return await self._call("POST", "/workloads", json=body, headers=headers)

    async def workload(self, workload_id: str) -> dict:
        return await self._call("GET", f"/workloads/{workload_id}")

    async def workloads(self, **params: Any) -> list[dict]:
        return await self._call("GET", "/workloads", params=params)

    async def cancel(self, workload_id: str) -> dict | None:
        """DELETE /workloads/{id}: cancel if queued, stop and release if running."""
        return await self._call("DELETE", f"/workloads/{workload_id}")
