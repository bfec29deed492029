"""The hub side's client of the gpupool REST API (``/api/v1``): `gpupool.client.AsyncClient`
with the answers as JSON dicts, as the spawner and authenticator read them.

Errors come back as `GpupoolAPIError` (`gpupool.client.ApiError`) carrying the server's
problem+json `detail` in `message` (a message that says what to change), so the spawner and
authenticator can show it to the user as is. `GpupoolUnavailable`
(`gpupool.client.Unreachable`) means the server could not be reached at all.
"""

from __future__ import annotations

from typing import Any

from gpupool.client import ApiError, AsyncClient, AsyncTransport, InvalidInput, Unreachable

GpupoolAPIError = ApiError
GpupoolUnavailable = Unreachable


class GpupoolClient:
    """Calls the gpupool API with one bearer token. Cheap to create; share one per token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: AsyncTransport | None = None,
    ):
        self.api = AsyncClient(base_url, token or "", timeout_s=timeout, transport=transport)
        self.base_url = self.api.url
        self.token = token
        self._timeout = timeout
        self._transport = transport

    async def aclose(self) -> None:
        await self.api.aclose()

    def with_token(self, token: str) -> GpupoolClient:
        return GpupoolClient(self.base_url, token, timeout=self._timeout, transport=self._transport)

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        return await self.api.request(method, path, **kw)

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
        """Submit the workload (`AsyncClient.submit`: one Idempotency-Key, reused on its
        retries); `service_token` (the hub's admin token) vouches for a `pod_spec` in it
        (X-Gpupool-Service-Token). A body the API's model refuses is a 422 here too."""
        try:
            w = await self.api.submit(body, service_token=service_token)
        except InvalidInput as e:
            raise GpupoolAPIError(422, str(e), "Invalid workload") from None
        return w.model_dump(mode="json")

    async def workload(self, workload_id: str) -> dict:
        return await self._call("GET", f"/workloads/{workload_id}")

    async def workloads(self, **params: Any) -> list[dict]:
        return await self._call("GET", "/workloads", params=params)

    async def cancel(self, workload_id: str) -> dict | None:
        """DELETE /workloads/{id}: cancel if queued, stop and release if running."""
        return await self._call("DELETE", f"/workloads/{workload_id}")
