"""Serving the whole app under a path prefix as well as at its root.

JupyterHub proxies its `gpupool` service at `/services/gpupool/...` to the gpupool server
without removing that prefix. `ServePrefix(app, "/services/gpupool")` lets such requests reach
the same routes: it records the prefix as the ASGI `root_path`, which Starlette strips when
matching routes and which the dashboard puts in front of every link and API call it makes.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

#: Where JupyterHub's proxy sends its `gpupool` service (see gpupool.server.hub.config).
HUB_SERVICE_PREFIX = "/services/gpupool"


class ServePrefix:
    """ASGI middleware: requests under `prefix` are served as if it were the app's root."""

    def __init__(self, app: ASGIApp, prefix: str = HUB_SERVICE_PREFIX) -> None:
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(f"prefix must start with '/' and not end with it, got {prefix!r}")
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            path: str = scope["path"]
            if path == self.prefix or path.startswith(self.prefix + "/"):
                scope = {**scope, "root_path": self.prefix}
        await self.app(scope, receive, send)
