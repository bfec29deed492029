"""Data routes the dashboard needs beyond the REST API: `/api/v1/dashboard/...`.

- `GET /dashboard/cluster`: every node and GPU with live readings and holders (one call per
  refresh instead of nodes + GPUs + workloads + telemetry).
- `GET /dashboard/gpu-history?range_s=`: utilization and memory per GPU over time.

Both need a logged-in user (the server's `authenticated` dependency). Any role may read them:
everyone may see who uses which GPU and whether it is busy (DESIGN.md, "everyone can see").
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from gpupool.domain import ValidationError
from gpupool.scheduler.fairshare import current_fair_shares
from gpupool.server.context import AppContext, get_ctx
from gpupool.telemetry.sampler import Frame, GPUPoint
from gpupool.web.page_data import RANGES_S, cluster_view, gpu_history_view, tenant_live_view


def _frames(ctx: AppContext) -> list[Frame]:
    return [s.latest for s in ctx.samplers if s.latest is not None]


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


def create_api_router() -> APIRouter:
    """The `/dashboard/...` data routes, to be mounted under the API prefix."""
    from gpupool.server.auth import Principal, authenticated
    from gpupool.store import AllocationRepo, NodeRepo, TenantRepo, WorkloadRepo

    router = APIRouter(prefix="/dashboard", tags=["dashboard"])

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
            view = {
                t: v for t, v in view.items() if any(t == r or t.startswith(r + "/") for r in roots)
            }
        return JSONResponse({"now": ctx.clock.now(), "tenants": view})

    @router.get(
        "/gpu-history", response_model=None, summary="Utilization and memory per GPU over time"
    )
    def gpu_history(
        range_s: int = Query(
            86400,
            description="how far back, in seconds: 3600, 86400, 604800 or 2592000",
        ),
        ctx: AppContext = Depends(get_ctx),
        _: Principal = Depends(authenticated),
    ) -> JSONResponse:
        if range_s not in RANGES_S:
            raise ValidationError(
                f"range_s must be one of {', '.join(map(str, RANGES_S))} (1 h, 24 h, 7 d, 30 d)",
                "range_s",
            )
        with ctx.store.read() as s:
            gpus = [(node, g.uuid, g.index, g.model) for node, g in NodeRepo(s).gpus()]
        # The sampler keeps every sample for an hour and per-minute means for a week.
        hist = _history(ctx, {g[1] for g in gpus}, per_minute=range_s > 3600)
        return JSONResponse(gpu_history_view(gpus, hist, now=ctx.clock.now(), range_s=range_s))

    return router
