"""Who may read /metrics: its per-tenant series (quotas, fair shares, budgets, waiting work,
who holds GPUs outside gpupool) are not for everyone who can reach the port.

- With a scrape token (`GPUPOOL_METRICS_TOKEN`): only requests that carry it,
  `Authorization: Bearer <token>`, from anywhere (Prometheus's `authorization:` block). The
  comparison is of SHA-256 digests with `hmac.compare_digest`: its time depends neither on
  where the guess differs nor on its length.
- Without one: only clients on this host (a loopback address) that came straight to the
  server, as it listens on 127.0.0.1 by default. A request that says it came through a proxy
  (`came_through_proxy`: Forwarded, X-Forwarded-*, X-Real-IP) is never taken for a local
  one, whatever address uvicorn settled on: a proxy on this host connects from 127.0.0.1,
  and the address uvicorn takes from X-Forwarded-For (from proxies in FORWARDED_ALLOW_IPS,
  the leftmost entry with `*`) may be one the client wrote itself. Reading /metrics through
  a proxy (JupyterHub's at /services/gpupool/metrics, say) needs the token. A proxy on this
  host that sends none of those headers still makes every client look local: set a token
  there.

Anything else gets a problem+json answer that says what to do (401 with a wrong or missing
token, 403 from another host or through a proxy without a token configured).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable

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
    """Whether `host` (a request's client address) is a loopback address, IPv4-mapped ones
    (`::ffff:127.0.0.1`, what a dual-stack socket reports) included; False for names and
    for no address (a Unix socket: only the server's own workers connect there, and they
    always name their client)."""
    if not host:
        return False
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # Python < 3.13 calls ::ffff:127.0.0.1 not loopback
    return ip.is_loopback


#: Request headers by which a proxy says it forwarded a request: RFC 7239's `Forwarded`,
#: the de-facto `X-Forwarded-*` (For, Proto, Host, Port, Prefix...) and nginx's `X-Real-IP`.
_FORWARDING_EXACT = frozenset({"forwarded", "x-real-ip"})
_FORWARDING_PREFIX = "x-forwarded-"
#: What an API worker adds to a request it passes to the primary when its caller's request
#: came through a proxy: the worker replaces X-Forwarded-For and X-Forwarded-Proto with what
#: it saw itself (gpupool.server.forward), which would hide that. Callers cannot set it.
VIA_PROXY_HEADER = "x-gpupool-via-proxy"
#: The ASGI scope key that marks a request an API worker passed on (ClientFromWorker sets it)
FROM_WORKER = "gpupool.from_worker"
#: The headers such a worker sets itself (not a proxy's)
_WORKER_SETS = frozenset({"x-forwarded-for", "x-forwarded-proto", VIA_PROXY_HEADER})


def came_through_proxy(names: Iterable[str], *, from_worker: bool = False) -> bool:
    """Whether a request with headers `names` (lower case) says it came through a proxy.
    `from_worker`: it reached the primary from an API worker, whose own X-Forwarded-For and
    X-Forwarded-Proto say nothing about a proxy; `VIA_PROXY_HEADER` says it instead."""
    for name in names:
        if from_worker and name in _WORKER_SETS:
            if name == VIA_PROXY_HEADER:
                return True
            continue
        if name in _FORWARDING_EXACT or name.startswith(_FORWARDING_PREFIX):
            return True
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
    proxied = came_through_proxy(
        request.headers.keys(), from_worker=bool(request.scope.get(FROM_WORKER))
    )
    if is_loopback(client) and not proxied:
        return None
    how = "through a proxy" if proxied else f"from {client or 'an unknown address'}"
    return problem(
        403,
        f"/metrics answers only clients on the server's own host that connect to it directly "
        f"(this one came {how}) unless a scrape token is set: set {TOKEN_VARIABLE} on the "
        "server and give Prometheus the same value (`authorization: {credentials_file: FILE}` "
        "in its scrape config); see docs/admin-guide.md, 'Prometheus and Grafana'",
    )
