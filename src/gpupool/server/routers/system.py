"""/healthz, /readyz (no authentication: for probes), /metrics (Prometheus: a scrape token, or
clients on this host only; gpupool.server.metrics_access)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from gpupool import __version__
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.metrics_access import refusal
from gpupool.server.problems import problem

router = APIRouter(tags=["system"])


@router.get("/healthz", summary="The process is alive")
async def healthz(ctx: AppContext = Depends(get_ctx)) -> dict[str, str]:
    """`process` names the server process that answered: `primary`, or `worker-N` with
    `gpupool up --workers N`; `version`: gpupool's (clients check it, gpupool.client)."""
    return {"status": "ok", "process": ctx.process, "version": __version__}


@router.get("/readyz", summary="The database answers and the loops run", response_model=None)
def readyz(ctx: AppContext = Depends(get_ctx)) -> dict[str, object] | Response:
    try:
        with ctx.store.read() as s:
            s.execute(text("SELECT 1"))
    except Exception as e:  # noqa: BLE001 - report, do not crash
        return problem(503, f"the database does not answer: {e}", title="Not ready")
    loops = {loop.name: loop.running for loop in ctx.loops}
    if ctx.settings.start_loops and not all(loops.values()):
        stopped = ", ".join(n for n, up in loops.items() if not up)
        return problem(503, f"background loops not running: {stopped}", title="Not ready")
    return {"status": "ready", "loops": loops}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        401: {"description": "wrong or missing scrape token"},
        403: {"description": "not from this host, and no scrape token set"},
    },
)
def metrics(request: Request, ctx: AppContext = Depends(get_ctx)) -> Response:
    """With `GPUPOOL_METRICS_TOKEN` set: `Authorization: Bearer <that token>`; without it,
    clients on the server's host only (per-tenant series are not public)."""
    refused = refusal(request, ctx.settings.metrics_token)
    if refused is not None:
        return refused
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
