"""Data routes the dashboard needs beyond the REST API: `/api/v1/dashboard/...`.

- `GET /dashboard/cluster`: every node and GPU with live readings and holders (one call per
  refresh instead of nodes + GPUs + workloads + telemetry).
- `GET /dashboard/gpu-history?range_s=`: utilization and memory per GPU over time, from the
  store's GPU history (per-minute rows for two days, hourly rows for 90) and, for the minutes
  not yet written there, the telemetry samplers in memory.
- `GET /dashboard/hub`: where JupyterHub's spawn page is when the hub runs beside this server
  (it starts the notebooks then: the dashboard's "Start notebook" opens it), else null.

Both need a logged-in user (the server's `authenticated` dependency). Any role may read them:
everyone may see who uses which GPU and whether it is busy (DESIGN.md, "everyone can see").
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from gpupool.domain import ValidationError
from gpupool.domain.tenancy import in_subtree
from gpupool.scheduler.fairshare import current_fair_shares
from gpupool.server.context import AppContext, get_ctx
from gpupool.store.history import HistoryRepo, Retention
from gpupool.telemetry.sampler import Frame, GPUPoint
from gpupool.web.page_data import (
    MAX_POINTS,
    RANGES_S,
    chart_window,
    cluster_view,
    gpu_history_view,
    tenant_live_view,
)


def hub_spawn_url(request: Request) -> str | None:
    """The URL of JupyterHub's spawn page as the browser that sent `request` reaches it: the
    same origin where the dashboard is served through the hub (``/services/gpupool``), else
    this host at the hub's public port. None when no hub runs beside this server."""
    sso = getattr(request.app.state, "hub_sso", None)
    if sso is None:
        return None
    if request.scope.get("root_path", "").rstrip("/") == sso.prefix:
        return "/hub/spawn"
    host = request.url.hostname or "127.0.0.1"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = sso.public_port or 8000
    return f"http://{host}:{port}/hub/spawn"


def _frames(ctx: AppContext) -> list[Frame]:
    """The local samplers' latest frames, then those of the nodes' agents (their reports)."""
    from gpupool.server.services.agents import report_frames

    local = [s.latest for s in ctx.samplers if s.latest is not None]
    return local + report_frames(ctx)


def _history(ctx: AppContext, uuids: set[str], per_minute: bool) -> dict[str, list[GPUPoint]]:
    """GPU uuid -> its points at one resolution, from whichever sampler has them."""
    out: dict[str, list[GPUPoint]] = {}
    for s in ctx.samplers:
        for uuid in uuids:
            if uuid in out or uuid not in s.gpus:
                continue
            pts = s.gpu_history(uuid, per_minute=per_minute)
            if pts:
                out[uuid] = pts
    return out


def _oldest_point(ctx: AppContext, s: Any, retention: Retention, uuids: set[str]) -> float | None:
    """The first GPU telemetry point there is: in the store's history or the samplers' memory."""
    repo = HistoryRepo(s)
    firsts = [repo.oldest(retention.fine_s), repo.oldest(retention.coarse_s)]
    for per_minute in (False, True):
        firsts += [pts[0].t for pts in _history(ctx, uuids, per_minute).values()]
    known = [t for t in firsts if t is not None]
    return min(known) if known else None


def _stored_history(
    s: Any, retention: Retention, uuids: list[str], *, now: float, range_s: int
) -> dict[str, list[GPUPoint]]:
    """GPU uuid -> its points from the store, one per slot of the chart's grid (at the slot's
    middle; slots aligned to whole widths): per-minute rows where the range is within their
    retention, else hourly rows and the minutes after the newest hour."""
    repo = HistoryRepo(s)
    width = max(1, range_s // MAX_POINTS)
    start = int(now - range_s) // width * width
    grid = {"start": start, "width": width, "count": MAX_POINTS + 1}
    parts = []
    minutes_from = None
    if range_s > retention.fine_keep_s:
        newest_hour = repo.newest(retention.coarse_s)
        if newest_hour is not None:
            minutes_from = newest_hour + retention.coarse_s
            parts.append(
                repo.buckets(uuids, **grid, resolution_s=retention.coarse_s, until=minutes_from)
            )
    parts.append(repo.buckets(uuids, **grid, resolution_s=retention.fine_s, since=minutes_from))
    out: dict[str, list[GPUPoint]] = {}
    for part in parts:
        for uuid, pts in part.items():
            out.setdefault(uuid, []).extend(GPUPoint(*p) for p in pts)
    return out


class HistoryCache:
    """The store's chart points per range, reused until the store has a newer minute or hour
    or a slot width has passed: the history changes once a minute, and over 24 h of many GPUs
    the query is the dashboard's most expensive (bench/results/history_size.md)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple, tuple[float, dict[str, list[GPUPoint]]]] = {}

    def get(
        self, s: Any, retention: Retention, uuids: list[str], *, now: float, range_s: int
    ) -> dict[str, list[GPUPoint]]:
        repo = HistoryRepo(s)
        key = (
            range_s,
            tuple(uuids),
            repo.newest(retention.fine_s),
            repo.newest(retention.coarse_s),
        )
        width = max(1, range_s // MAX_POINTS)
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and 0 <= now - hit[0] < width:
            return {u: list(p) for u, p in hit[1].items()}
        points = _stored_history(s, retention, uuids, now=now, range_s=range_s)
        with self._lock:
            # one entry per range offered; a young server's shorter windows replace each other
            self._entries = {
                k: v for k, v in self._entries.items() if k[0] != range_s and k[0] in RANGES_S
            }
            self._entries[key] = (now, points)
        return {u: list(p) for u, p in points.items()}


def create_api_router() -> APIRouter:
    """The `/dashboard/...` data routes, to be mounted under the API prefix."""
    from gpupool.server.auth import authenticated
    from gpupool.server.loops.history import HistoryLoop
    from gpupool.server.principal import Principal
    from gpupool.store import AllocationRepo, NodeRepo, TenantRepo, WorkloadRepo

    router = APIRouter(prefix="/dashboard", tags=["dashboard"])
    history_cache = HistoryCache()  # one per app: each app includes its own router

    # Responses are built as plain dicts and sent as JSONResponse (no response-model pass:
    # these are the dashboard's hottest calls).
    @router.get(
        "/cluster", response_model=None, summary="Nodes and GPUs with live readings and holders"
    )
    def cluster(
        ctx: AppContext = Depends(get_ctx), _: Principal = Depends(authenticated)
    ) -> JSONResponse:
        with ctx.store.read() as s:
            nodes = NodeRepo(s).list()
            running = [(r.workload, r.allocation) for r in AllocationRepo(s).running()]
        return JSONResponse(cluster_view(nodes, running, _frames(ctx), now=ctx.clock.now()))

    @router.get("/tenants", response_model=None, summary="Fair share and busy GPUs per tenant")
    def tenants(
        ctx: AppContext = Depends(get_ctx), who: Principal = Depends(authenticated)
    ) -> JSONResponse:
        with ctx.store.read() as s:
            tree = TenantRepo(s).tree()
            running = [(r.workload, r.allocation) for r in AllocationRepo(s).running()]
            nodes = NodeRepo(s).list()
            fair = current_fair_shares(tree, nodes, running, WorkloadRepo(s).pending())
        names = [t.name for t in tree]
        view = tenant_live_view(names, running, _frames(ctx), fair)
        roots = who.readable_roots()
        if roots is not None:
            view = {t: v for t, v in view.items() if any(in_subtree(t, r) for r in roots)}
        return JSONResponse({"now": ctx.clock.now(), "tenants": view})

    @router.get("/hub", response_model=None, summary="JupyterHub's spawn page, if the hub runs")
    def hub(request: Request, _: Principal = Depends(authenticated)) -> JSONResponse:
        return JSONResponse({"spawn_url": hub_spawn_url(request)})

    @router.get(
        "/gpu-history", response_model=None, summary="Utilization and memory per GPU over time"
    )
    def gpu_history(
        range_s: int = Query(
            86400,
            description="how far back, in seconds: 3600, 86400, 604800 or 2592000; a server "
            "younger than that answers for its age (rounded up to 10 min): `range_s` in the "
            "answer is the span drawn, `asked_range_s` the one asked for",
        ),
        ctx: AppContext = Depends(get_ctx),
        _: Principal = Depends(authenticated),
    ) -> JSONResponse:
        if range_s not in RANGES_S:
            raise ValidationError(
                f"range_s must be one of {', '.join(map(str, RANGES_S))} (1 h, 24 h, 7 d, 30 d)",
                "range_s",
            )
        now = ctx.clock.now()
        loop = ctx.loops.get("history")
        retention = loop.retention if isinstance(loop, HistoryLoop) else Retention()
        asked = range_s
        with ctx.store.read() as s:
            gpus = [(node, g.uuid, g.index, g.model) for node, g in NodeRepo(s).gpus()]
            oldest = _oldest_point(ctx, s, retention, {g[1] for g in gpus})
            range_s = chart_window(now, asked, oldest)
            hist = history_cache.get(s, retention, [g[1] for g in gpus], now=now, range_s=range_s)
        # The samplers' memory wins where it reaches (every sample of the last hour, or
        # per-minute means, the minute in progress included); the store covers before that.
        half = max(1, range_s // MAX_POINTS) / 2
        live = _history(ctx, {g[1] for g in gpus}, per_minute=range_s > 3600)
        for uuid, pts in live.items():
            older = [p for p in hist.get(uuid, ()) if p.t - half < pts[0].t]
            hist[uuid] = [*older, *pts]
        view = gpu_history_view(gpus, hist, now=now, range_s=range_s)
        return JSONResponse(view | {"asked_range_s": asked})

    return router
