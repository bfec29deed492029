"""What an API worker process serves itself, and the forwarding of the rest to the primary.

With `gpupool up --workers N` the API is served by N processes on one port. Only the primary
process runs the background loops and holds live state (the executor and its jobs, telemetry
samplers, the scheduler's last decisions, Prometheus counters). A worker answers itself
only the requests that need nothing but the database — the polling reads, submissions and
logins that make up almost all traffic — and `ForwardToPrimary` passes every other request,
unchanged (headers, cookies and body), to the primary over its Unix socket and streams the
answer back. The primary authenticates forwarded requests itself, so the socket grants
nothing the public port does not.

`served_locally(method, path)` is the one list of what a worker serves; a test walks every
route of the app against it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.server.metrics_access import FROM_WORKER, VIA_PROXY_HEADER, came_through_proxy
from gpupool.server.problems import MEDIA_TYPE

log = logging.getLogger(__name__)

_API = "/api/v1"
_NAME = r"[^/]+"
#: (method, path pattern): database-only routes a worker answers itself.
_LOCAL: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (method, re.compile(pattern))
    for method, pattern in (
        ("GET", r"/healthz"),
        ("GET", rf"{_API}/workloads"),
        ("GET", rf"{_API}/workloads/{_NAME}"),  # not .../logs: the executor has them
        ("POST", rf"{_API}/workloads"),  # the primary is woken over the bus
        ("GET", rf"{_API}/queue"),
        ("GET", rf"{_API}/(nodes|gpus|profiles|users)(/{_NAME})?"),
        ("GET", rf"{_API}/tenants(/.+)?"),
        ("GET", rf"{_API}/(usage|events|tokens)"),
        ("GET", rf"{_API}/auth/me"),
        ("POST", rf"{_API}/auth/login"),  # a password check and a new token row
    )
)
#: hop-by-hop headers (RFC 9110 7.6.1) are not passed on; uvicorn frames each side itself
_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
}


#: ... nor what a caller says about where it came from: the worker says that itself
_VIA_PROXY = VIA_PROXY_HEADER.encode("latin-1")
_NOT_PASSED = _HOP | {b"x-forwarded-for", b"x-forwarded-proto", _VIA_PROXY}


def _forwarded_for(scope: Scope) -> list[tuple[bytes, bytes]]:
    """Who the worker was talking to (after its own proxy-header handling), for the primary's
    `ClientFromWorker`, and whether the caller's request came through a proxy (the headers
    that said so are replaced here: /metrics must still know, gpupool.server.metrics_access)."""
    out = [(b"x-forwarded-proto", scope.get("scheme", "http").encode("latin-1"))]
    client = scope.get("client")
    if client:
        out.append((b"x-forwarded-for", str(client[0]).encode("latin-1")))
    if came_through_proxy(k.decode("latin-1").lower() for k, _ in scope["headers"]):
        out.append((_VIA_PROXY, b"1"))
    return out


def served_locally(method: str, path: str) -> bool:
    """Whether an API worker answers this request itself (else it goes to the primary)."""
    method = "GET" if method == "HEAD" else method
    return any(m == method and p.fullmatch(path) for m, p in _LOCAL)


class ForwardToPrimary:
    """ASGI middleware for API workers: requests not `served_locally` go to the primary
    process at the Unix socket `primary_socket`. `after_change()` runs once a forwarded
    request other than a read has been answered: it may have changed users, roles or tokens,
    so the worker forgets its cached tokens before its client's next request (the primary's
    bus notice reaches the other processes a moment later)."""

    def __init__(self, app: ASGIApp, primary_socket: str, after_change: Callable[[], None]):
        self.app = app
        self.after_change = after_change
        self._client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=primary_socket),
            base_url="http://primary",
            timeout=httpx.Timeout(300.0, connect=10.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] != "http" or served_locally(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        await self._forward(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def closing_send(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self._client.aclose()
            await send(message)

        await self.app(scope, receive, closing_send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        while True:  # request bodies are small (the app's BodyLimit counts them)
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        path = scope.get("raw_path") or scope["path"].encode()
        url = path.decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _NOT_PASSED]
        headers += _forwarded_for(scope)
        request = self._client.build_request(
            scope["method"], url, headers=headers, content=bytes(body)
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as e:
            log.warning("forwarding %s %s to the primary failed: %s", scope["method"], url, e)
            await _unavailable(send)
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP],
                }
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
            if scope["method"] not in ("GET", "HEAD"):
                self.after_change()


async def _unavailable(send: Send) -> None:
    body = (
        b'{"type":"about:blank","title":"Service Unavailable","status":503,'
        b'"detail":"the gpupool server is restarting (its primary process does not answer); '
        b'retry in a few seconds"}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"2"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _over_unix_socket(scope: Scope) -> bool:
    """Whether the request came over a Unix socket: no peer address, or (where uvicorn's
    proxy-header rules already filled one in, e.g. `FORWARDED_ALLOW_IPS=*`, which trusts
    the socket too) a local address without a port."""
    server = scope.get("server")
    return scope.get("client") is None or (server is not None and server[1] is None)


class ClientFromWorker:
    """ASGI middleware for the primary: a request that came over its Unix socket (it has no
    peer address; only the server's own workers can connect there) takes its client address
    and scheme from the worker's X-Forwarded-For / X-Forwarded-Proto, so logs name the real
    client, and is marked `FROM_WORKER` (its X-Forwarded-* headers are the worker's, not a
    proxy's). Requests over TCP are left to uvicorn's own proxy-header rules."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _over_unix_socket(scope):
            scope[FROM_WORKER] = True
            headers = dict(scope["headers"])
            # in place, as uvicorn's own proxy-header middleware does: its access log reads
            # the scope it made
            if b"x-forwarded-for" in headers:
                scope["client"] = (headers[b"x-forwarded-for"].decode("latin-1"), 0)
            if headers.get(b"x-forwarded-proto") in (b"http", b"https"):
                scope["scheme"] = headers[b"x-forwarded-proto"].decode("latin-1")
        await self.app(scope, receive, send)
