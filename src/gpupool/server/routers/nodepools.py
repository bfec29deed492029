"""/node-pools: node pools an autoscaler grows and shrinks (admins write, everyone reads)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from gpupool.api.nodepools import NodePoolIn, NodePoolOut, NodePoolPatchIn
from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.services import nodepools

router = APIRouter(tags=["node-pools"])


@router.get("/node-pools", summary="Node pools, their nodes' states and requests in flight")
def list_node_pools(
    p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[NodePoolOut]:
    return nodepools.list_pools(ctx, p)


@router.post("/node-pools", status_code=201, summary="Define a node pool (admin)")
def create_node_pool(
    body: NodePoolIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> NodePoolOut:
    return nodepools.create_pool(ctx, p, body)


@router.get("/node-pools/{name}", summary="One node pool")
def get_node_pool(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> NodePoolOut:
    return nodepools.get_pool(ctx, p, name)


@router.patch("/node-pools/{name}", summary="Change a node pool (admin)")
def update_node_pool(
    name: str,
    body: NodePoolPatchIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> NodePoolOut:
    return nodepools.update_pool(ctx, p, name, body)


@router.delete("/node-pools/{name}", status_code=204, response_class=Response)
def delete_node_pool(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> Response:
    nodepools.delete_pool(ctx, p, name)
    return Response(status_code=204)
