"""Who may read /metrics: its per-tenant series (quotas, fair shares, budgets, waiting work,
who holds GPUs outside gpupool) are not for everyone who can reach the port.

- With a scrape token (`GPUPOOL_METRICS_TOKEN`): only requests that carry it,
  `Authorization: Bearer <token>`, from anywhere (Prometheus's `authorization:` block). The
  comparison is of SHA-256 digests with `hmac.compare_digest`: its time depends neither on
  where the guess differs nor on its length.
- Without one: only clients on this host (a loopback address), as the server listens on
  127.0.0.1 by default. Behind a proxy on this host the client is the one the proxy names in
  X-Forwarded-For (uvicorn trusts proxies on 127.0.0.1); a proxy that names none makes every
  client look local, so set a token there.

Anything else gets a problem+json answer that says what to do (401 with a wrong or missing
token, 403 from another host without a token configured).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from fastapi import Request
from fastapi.responses import JSONResponse

from gpupool.server.problems import problem

TOKEN_VARIABLE = "GPUPOOL_METRICS_TOKEN"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def token_matches(given: str, expected: str) -> bool:
    """Whether `given` is the scrape token, in time independent of both."""
    return hmac.compare_digest(_digest(given), _digest(expected))


def is_loopback(host: str | None) -> bool:
    """Whether `host` (a request's client address) is a loopback address; False for names
    and for no address (a Unix socket: only the server's own workers connect there, and they
    always name their client)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def refusal(request: Request, token: str | None) -> JSONResponse | None:
    """None when `request` may read /metrics, else the answer to give it."""
    if token:
        given = _bearer(request)
        if given is not None and token_matches(given, token):
            return None
        return problem(
            401,
            "/metrics needs the scrape token: send `Authorization: Bearer <token>` with the "
            f"value of the server's {TOKEN_VARIABLE} (Prometheus: `authorization: "
            "{credentials_file: FILE}` in the scrape config)",
            headers={"WWW-Authenticate": 'Bearer realm="gpupool metrics"'},
        )
    client = request.client.host if request.client else None
    if is_loopback(client):
        return None
    return problem(
        403,
        f"/metrics answers only clients on the server's own host (this one is "
        f"{client or 'unknown'}) unless a scrape token is set: set {TOKEN_VARIABLE} on the "
        "server and give Prometheus the same value (`authorization: {credentials_file: FILE}` "
        "in its scrape config); see docs/admin-guide.md, 'Prometheus and Grafana'",
    )
