"""/profiles: named workload shapes (admins write, everyone reads those offered to them)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.workloads import ProfileIn, ProfileOut, ProfileSpecIn
from gpupool.server.services import profiles

router = APIRouter(tags=["profiles"])


@router.get("/profiles", summary="Profiles offered to my tenants (admins: all)")
def list_profiles(
    p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[ProfileOut]:
    return profiles.list_profiles(ctx, p)


@router.post("/profiles", status_code=201, summary="Define a profile (admin)")
def create_profile(
    body: ProfileIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> ProfileOut:
    spec = ProfileSpecIn.model_validate(body.model_dump(exclude={"name"}))
    return profiles.save_profile(ctx, p, body.name, spec, create=True)


@router.get("/profiles/{name}")
def get_profile(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> ProfileOut:
    return profiles.get_profile(ctx, p, name)


@router.put("/profiles/{name}", summary="Replace a profile (admin)")
def replace_profile(
    name: str,
    body: ProfileSpecIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> ProfileOut:
    return profiles.save_profile(ctx, p, name, body, create=False)


@router.delete("/profiles/{name}", status_code=204, response_class=Response)
def delete_profile(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> Response:
    profiles.delete_profile(ctx, p, name)
    return Response(status_code=204)
