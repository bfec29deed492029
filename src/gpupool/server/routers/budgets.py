"""/budgets, /reservations and /usage/chargeback (issue 35 parts 2-4)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Path, Query, Response

from gpupool.api.base import INT32_MAX
from gpupool.api.budgets import (
    BudgetIn,
    BudgetOut,
    ChargebackOut,
    ReservationIn,
    ReservationOut,
    chargeback_csv,
)
from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.services import budgets, chargeback, reservations

router = APIRouter()


@router.get("/budgets", tags=["budgets"], summary="GPU-hour budgets and their use this period")
def list_budgets(
    tenant: str | None = Query(None, max_length=255),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> list[BudgetOut]:
    return budgets.list_budgets(ctx, p, tenant)


@router.put("/budgets", tags=["budgets"], summary="Set a tenant's budget for a period (admin)")
def put_budget(
    body: BudgetIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> BudgetOut:
    return budgets.put_budget(ctx, p, body)


@router.delete("/budgets/{budget_id}", tags=["budgets"], status_code=204, response_class=Response)
def delete_budget(
    budget_id: int = Path(ge=1, le=INT32_MAX),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> Response:
    budgets.delete_budget(ctx, p, budget_id)
    return Response(status_code=204)


@router.get("/reservations", tags=["reservations"], summary="Advance reservations I may see")
def list_reservations(
    past: bool = Query(False, description="also those whose window is over"),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> list[ReservationOut]:
    return reservations.list_reservations(ctx, p, past)


@router.post(
    "/reservations",
    tags=["reservations"],
    status_code=201,
    summary="Book GPUs for a tenant over a window (admin; tenant-admin within its guarantee)",
)
def add_reservation(
    body: ReservationIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> ReservationOut:
    return reservations.add_reservation(ctx, p, body)


@router.delete(
    "/reservations/{reservation_id}",
    tags=["reservations"],
    status_code=204,
    response_class=Response,
)
def delete_reservation(
    reservation_id: str = Path(max_length=64),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> Response:
    reservations.delete_reservation(ctx, p, reservation_id)
    return Response(status_code=204)


@router.get(
    "/usage/chargeback",
    tags=["usage"],
    summary="GPU-hours, memory and energy per tenant, user or GPU model (json or csv)",
    response_model=ChargebackOut,
    responses={200: {"content": {"text/csv": {}}}},
)
def usage_chargeback(
    by: Literal["tenant", "user", "model"] = "tenant",
    from_: str | None = Query(None, alias="from", description="first day, YYYY-MM-DD (UTC)"),
    to: str | None = Query(None, description="last day, YYYY-MM-DD (UTC)"),
    tenant: str | None = Query(None, max_length=255),
    format: Literal["json", "csv"] = "json",
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> ChargebackOut | Response:
    rep = chargeback.report(ctx, p, by, from_, to, tenant)
    if format == "csv":
        name = f"gpupool-usage-{by}-{rep.from_day or 'start'}-{rep.to_day or 'now'}.csv"
        return Response(
            chargeback_csv(rep),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    return rep
