"""/workloads and /queue."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import StreamingResponse

from gpupool.domain import ValidationError, WorkloadState
from gpupool.engines.common import logread
from gpupool.server.auth import authenticated
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.workloads import (
    Kind,
    LogsOut,
    QueueEntryOut,
    State,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
)
from gpupool.server.services import idempotency, workloads
from gpupool.server.services import logs as log_reads
from gpupool.server.workload_json import json_response

router = APIRouter()

# The hot polling endpoints answer with memoised JSON objects (gpupool.server.workload_json),
# encoded once; response_model documents their schema.


@router.post(
    "/workloads",
    tags=["workloads"],
    status_code=201,
    summary="Submit a job or notebook",
    responses={200: {"description": "an earlier submission with this Idempotency-Key"}},
)
def submit(
    body: WorkloadIn,
    response: Response,
    idempotency_key: str | None = Header(
        None,
        alias=idempotency.HEADER,
        max_length=idempotency.MAX_KEY_LENGTH,
        description="a new UUID per submission, the same on its retries: a retry answers "
        "with the workload already made (200) instead of submitting again",
    ),
    service_token: str | None = Header(
        None,
        alias="X-Gpupool-Service-Token",
        description="an admin's token (JupyterHub's): required with pod_spec",
    ),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> WorkloadOut:
    if body.pod_spec is not None or service_token is not None:
        workloads.check_vouched(ctx, service_token)
    out, created = idempotency.submit(ctx, p, body, idempotency_key)
    if not created:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return out


@router.get(
    "/workloads",
    tags=["workloads"],
    summary="Workloads I may see, newest first",
    response_model=list[WorkloadOut],
)
def list_workloads(
    state: list[State] | None = Query(None, description="repeat to match several states"),
    tenant: str | None = Query(None, max_length=255),
    user: str | None = Query(None, max_length=128),
    kind: Kind | None = None,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=10_000_000),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> Response:
    found = workloads.list_workloads(
        ctx,
        p,
        states=[WorkloadState(s) for s in state] if state else None,
        tenant=tenant,
        user=user,
        kind=kind,
        limit=limit,
        offset=offset,
    )
    return json_response(found)


@router.get("/workloads/{workload_id}", tags=["workloads"], summary="One workload, with events")
def get_workload(
    workload_id: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> WorkloadDetailOut:
    return workloads.get_workload(ctx, p, workload_id)


@router.delete("/workloads/{workload_id}", tags=["workloads"], summary="Cancel a workload")
def cancel(
    workload_id: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> WorkloadOut:
    return workloads.cancel(ctx, p, workload_id)


@router.get(
    "/workloads/{workload_id}/logs",
    tags=["workloads"],
    summary="Output of the work",
    response_model=LogsOut,
    description=(
        "The whole output, streamed as it is read; `tail=N`: the last N lines, read from "
        f"at most the last {logread.TAIL_MAX_BYTES // 1024} KiB of the log, lines over "
        f"{logread.LINE_MAX_BYTES // 1024} KiB cut with a marker; `offset=B`: a page of at "
        "most `limit` bytes from byte B, with `next_offset` (docs/api.md, Logs)."
    ),
)
def logs(
    workload_id: str,
    tail: int | None = Query(None, ge=1, le=100_000, description="only the last N lines"),
    offset: int | None = Query(None, ge=0, description="a page from this byte of the log"),
    limit: int = Query(
        log_reads.PAGE_MAX_BYTES, ge=4, le=log_reads.PAGE_MAX_BYTES, description="page size"
    ),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> Response | LogsOut:
    if tail is not None and offset is not None:
        raise ValidationError("give tail (the last lines) or offset (a page), not both", "tail")
    if tail is not None:
        return log_reads.tail(ctx, p, workload_id, tail)
    if offset is not None:
        return log_reads.page(ctx, p, workload_id, offset, limit)
    return StreamingResponse(log_reads.stream(ctx, p, workload_id), media_type="application/json")


@router.get(
    "/queue",
    tags=["queue"],
    summary="Pending workloads with position and reason",
    response_model=list[QueueEntryOut],
)
def queue(
    tenant: str | None = Query(None, max_length=255),
    limit: int = Query(500, ge=1, le=5000, description="at most this many, from the front"),
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> Response:
    return json_response(workloads.queue(ctx, p, tenant, limit))
