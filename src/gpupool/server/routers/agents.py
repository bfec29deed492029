"""/nodes/{name}/report (node agents) and /nodes/{name}/tokens (their credentials, admins)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.agents import (
    NodeReportAck,
    NodeReportIn,
    NodeTokenCreated,
    NodeTokenOut,
)
from gpupool.server.services import agents

router = APIRouter()
_node_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="NodeCredential",
    description="a node credential from POST /api/v1/nodes/{name}/tokens",
)


def _node_credential(
    name: str,
    creds: HTTPAuthorizationCredentials | None = Depends(_node_bearer),
    ctx: AppContext = Depends(get_ctx),
) -> str:
    """The id of the caller's credential for node `name`; checked before the body is read, so
    a caller without one learns nothing about what a report must hold."""
    return agents.node_credential(ctx, name, creds.credentials if creds else None)


@router.post(
    "/nodes/{name}/report",
    tags=["agents"],
    summary="A node agent reports its GPUs and processes (node credential only)",
)
def report(
    name: str,
    body: NodeReportIn,
    token_id: str = Depends(_node_credential),
    ctx: AppContext = Depends(get_ctx),
) -> NodeReportAck:
    return agents.accept_report(ctx, name, token_id, body)


@router.post(
    "/nodes/{name}/tokens",
    tags=["agents"],
    status_code=201,
    summary="Create a credential for the node's agent (admin; the secret is shown once)",
)
def create_token(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> NodeTokenCreated:
    return agents.create_token(ctx, p, name)


@router.get("/nodes/{name}/tokens", tags=["agents"], summary="The node's credentials (admin)")
def list_tokens(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[NodeTokenOut]:
    return agents.list_tokens(ctx, p, name)


@router.delete(
    "/nodes/{name}/tokens/{token_id}", tags=["agents"], summary="Revoke a node credential (admin)"
)
def revoke_token(
    name: str,
    token_id: str,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> NodeTokenOut:
    return agents.revoke_token(ctx, p, name, token_id)
