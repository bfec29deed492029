"""/usage and /events."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.workloads import EventOut, UsageReportOut
from gpupool.server.services import reports

router = APIRouter()


@router.get(
    "/usage",
    tags=["usage"],
    summary="GPU-hours allocated and busy, grouped by user, tenant or day",
    response_model_by_alias=True,
)
def usage(
    group_by: Literal["user", "tenant", "day"] = "tenant",
    from_: str | None = Query(None, alias="from", description="first day, YYYY-MM-DD (UTC)"),
    to: str | None = Query(None, description="last day, YYYY-MM-DD (UTC)"),
    tenant: str | None = Query(None, max_length=255),
    user: str | None = Query(None, max_length=128),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> UsageReportOut:
    return reports.usage(ctx, p, group_by, from_, to, tenant, user)


@router.get("/events", tags=["events"], summary="The event log, newest first")
def events(
    workload: str | None = Query(None, max_length=64),
    tenant: str | None = Query(None, max_length=255),
    kind: str | None = Query(None, max_length=64, description="prefix, e.g. 'workload.'"),
    since: float | None = Query(None, description="seconds since the epoch", allow_inf_nan=False),
    limit: int = Query(100, ge=1, le=1000),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> list[EventOut]:
    return reports.events(
        ctx, p, workload_id=workload, tenant=tenant, kind=kind, since=since, limit=limit
    )
