"""`gpupool mcp`: gpupool's tools for an AI assistant, over the Model Context Protocol on
stdio (the official `mcp` package), on top of `gpupool.client` with the caller's own URL,
token and permissions (GPUPOOL_URL/GPUPOOL_TOKEN or `gpupool login`'s file).

Read tools by default: the cluster map, the queue with reasons and expected starts, my
workloads, one workload, its log, my usage, a tenant's quota. `--allow-submit` adds
`submit` and `cancel`. A refusal reaches the assistant as a tool error carrying the server's
message (which says what to do).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gpupool import __version__
from gpupool.client import AsyncClient, GpupoolError

P = ParamSpec("P")
R = TypeVar("R")
READ_TOOLS = ("cluster", "queue", "my_workloads", "workload", "logs", "my_usage", "tenant_quota")
WRITE_TOOLS = ("submit", "cancel")

INSTRUCTIONS = (
    "gpupool pools GPUs and shares them among users and tenants. These tools act as the "
    "user whose token the server was started with, with that user's permissions. Workload "
    "ids look like w-xxxxxxxxxx. Times are ISO 8601 UTC or Unix seconds."
)


def _told(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The client's errors as tool errors with their message (the assistant reads it)."""

    @wraps(fn)
    async def tool(*a: P.args, **kw: P.kwargs) -> R:
        try:
            return await fn(*a, **kw)
        except GpupoolError as e:
            raise ToolError(str(e)) from None

    return tool


def build_server(
    url: str | None = None, token: str | None = None, *, allow_submit: bool = False
) -> MCPServer:
    """The MCP server; `url`/`token` as for `gpupool.client.AsyncClient`."""
    server: MCPServer = MCPServer(
        "gpupool", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    def client() -> AsyncClient:
        return AsyncClient(url, token)

    @server.tool(description="The nodes, their GPUs (model, sharing, health) and who holds them.")
    @_told
    async def cluster() -> list[dict[str, Any]]:
        async with client() as gp:
            return [n.model_dump(mode="json") for n in await gp.nodes()]

    @server.tool(
        description="Pending workloads in scheduling order, each with why it waits (`reason`) "
        "and, when gpupool can bound it, `wait.expected_start`."
    )
    @_told
    async def queue(tenant: str | None = None) -> list[dict[str, Any]]:
        async with client() as gp:
            return [e.model_dump(mode="json") for e in await gp.queue(tenant)]

    @server.tool(description="My workloads, newest first (optionally only some states).")
    @_told
    async def my_workloads(state: list[str] | None = None, limit: int = 50) -> list[dict[str, Any]]:
        async with client() as gp:
            ws = await gp.workloads(mine=True, state=state, limit=limit)
            return [w.model_dump(mode="json") for w in ws]

    @server.tool(description="One workload: request, state, allocation, why it waits, events.")
    @_told
    async def workload(workload_id: str) -> dict[str, Any]:
        async with client() as gp:
            return (await gp.workload(workload_id)).model_dump(mode="json")

    @server.tool(description="The last lines of a workload's output.")
    @_told
    async def logs(workload_id: str, tail: int = 100) -> str:
        async with client() as gp:
            return (await gp.logs(workload_id, tail=tail)).text

    @server.tool(
        description="My GPU-hours (allocated, busy) and efficiency by day; default: this month."
    )
    @_told
    async def my_usage(from_day: str | None = None, to_day: str | None = None) -> dict[str, Any]:
        today = datetime.now(UTC).date()
        async with client() as gp:
            me = (await gp.me()).name
            report = await gp.usage(
                "day", user=me, from_=from_day or today.replace(day=1), to=to_day or today
            )
            return report.model_dump(mode="json", by_alias=True)

    @server.tool(description="A tenant's quota (guaranteed, limit, weight) and current use.")
    @_told
    async def tenant_quota(tenant: str) -> dict[str, Any]:
        async with client() as gp:
            return (await gp.tenant(tenant)).model_dump(mode="json")

    if not allow_submit:
        return server

    @server.tool(
        description="Submit a job as me. Give the command (a list of arguments) and what it "
        "needs: whole `gpus`, or a `gpu_fraction` (0..1) with `gpu_memory` like '20G'."
    )
    @_told
    async def submit(
        command: list[str],
        gpus: int = 0,
        gpu_fraction: float | None = None,
        gpu_memory: str | None = None,
        gpu_model: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        kind: Literal["job", "notebook"] = "job",
        max_runtime_s: float | None = None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"command": command, "gpus": gpus, "kind": kind}
        for k, v in (
            ("gpu_fraction", gpu_fraction),
            ("gpu_memory", gpu_memory),
            ("gpu_model", gpu_model),
            ("name", name),
            ("tenant", tenant),
            ("max_runtime_s", max_runtime_s),
        ):
            if v is not None:
                fields[k] = v
        async with client() as gp:
            return (await gp.submit(**fields)).model_dump(mode="json")

    @server.tool(description="Cancel one of my workloads (queued: at once; running: stopped).")
    @_told
    async def cancel(workload_id: str) -> dict[str, Any]:
        async with client() as gp:
            return (await gp.cancel(workload_id)).model_dump(mode="json")

    return server
