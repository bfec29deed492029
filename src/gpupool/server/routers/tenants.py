"""/tenants: the tree, quotas and idle policy."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.tenancy import TenantCreateIn, TenantOut, TenantUpdateIn
from gpupool.server.services import tenants

router = APIRouter(tags=["tenants"])


@router.get("/tenants", summary="The tenant tree I may see, with quotas and current use")
def list_tenants(
    p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[TenantOut]:
    return tenants.list_tenants(ctx, p)


@router.post("/tenants", status_code=201, summary="Create a tenant (admin; tenant-admin below)")
def create_tenant(
    body: TenantCreateIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> TenantOut:
    return tenants.create_tenant(ctx, p, body)


@router.get("/tenants/{name:path}")
def get_tenant(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> TenantOut:
    return tenants.get_tenant(ctx, p, name)


@router.patch("/tenants/{name:path}", summary="Change quota or idle policy")
def update_tenant(
    name: str,
    body: TenantUpdateIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> TenantOut:
    return tenants.update_tenant(ctx, p, name, body)


@router.delete("/tenants/{name:path}", status_code=204, response_class=Response)
def delete_tenant(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> Response:
    tenants.delete_tenant(ctx, p, name)
    return Response(status_code=204)
