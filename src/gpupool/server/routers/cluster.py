"""/nodes and /gpus."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.cluster import GpuOut, GpuUpdateIn, NodeIn, NodeOut, NodeStateIn
from gpupool.server.services import cluster

router = APIRouter()


@router.get("/nodes", tags=["nodes"], summary="Nodes with their GPUs and who holds them")
def list_nodes(
    _: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[NodeOut]:
    return cluster.list_nodes(ctx)


@router.get("/nodes/{name}", tags=["nodes"])
def get_node(
    name: str, _: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> NodeOut:
    return cluster.get_node(ctx, name)


@router.put("/nodes/{name}", tags=["nodes"], summary="Register or refresh a node (admin)")
def put_node(
    name: str,
    body: NodeIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> NodeOut:
    return cluster.put_node(ctx, p, name, body)


@router.patch("/nodes/{name}", tags=["nodes"], summary="Drain, restore or mark down (admin)")
def set_node_state(
    name: str,
    body: NodeStateIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> NodeOut:
    return cluster.set_node_state(ctx, p, name, body.state)


@router.delete("/nodes/{name}", tags=["nodes"], status_code=204, response_class=Response)
def delete_node(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> Response:
    cluster.delete_node(ctx, p, name)
    return Response(status_code=204)


@router.get("/gpus", tags=["gpus"], summary="Every GPU, its sharing mode and holders")
def list_gpus(
    _: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[GpuOut]:
    return cluster.list_gpus(ctx)


@router.get("/gpus/{uuid}", tags=["gpus"])
def get_gpu(
    uuid: str, _: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> GpuOut:
    return cluster.get_gpu(ctx, uuid)


@router.patch(
    "/gpus/{uuid}", tags=["gpus"], summary="Set the sharing mode and/or MIG layout (admin)"
)
def update_gpu(
    uuid: str,
    body: GpuUpdateIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> GpuOut:
    return cluster.set_sharing(ctx, p, uuid, body)
