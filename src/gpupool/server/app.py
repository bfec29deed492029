"""The FastAPI app factory.

`create_app(settings, executor=..., clock=...)` opens the store (running migrations), creates
the context and metrics, and mounts the API under /api/v1 (OpenAPI at /api/v1/openapi.json).
It adds no loops: the whole system, loops included, is assembled by
`gpupool.system.build_system`, which calls this. Loops in `app.state.ctx.loops` run
while the app serves when `settings.start_loops`, and stop on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from prometheus_client.registry import Collector

from gpupool import __version__
from gpupool.clock import Clock
from gpupool.engines.common.executor import Executor
from gpupool.server import problems
from gpupool.server.agentmetrics import AgentTelemetryCollector
from gpupool.server.budgetmetrics import BudgetCollector
from gpupool.server.context import AppContext
from gpupool.server.forward import ClientFromWorker, ForwardToPrimary
from gpupool.server.loops.base import LoopGroup
from gpupool.server.metrics import Metrics
from gpupool.server.poolmetrics import NodePoolCollector
from gpupool.server.routers import (
    accounts,
    agents,
    budgets,
    cluster,
    nodepools,
    profiles,
    reports,
    system,
    tenants,
    workloads,
)
from gpupool.server.settings import Settings
from gpupool.store import Store, open_store

API_PREFIX = "/api/v1"


def create_app(
    settings: Settings,
    *,
    executor: Executor,
    clock: Clock,
    telemetry: Collector | None = None,
    store: Store | None = None,
    forward_to: str | None = None,
) -> FastAPI:
    """Build the app. `store` may be given (tests share one); otherwise it is opened from
    `settings.database_url`. `telemetry`, when given, is a prometheus collector of this
    host's GPU series for /metrics (default: rendered from `ctx.samplers`, the telemetry
    loops' samplers); node agents' series are merged with it. `forward_to` makes it an API
    worker's app: requests it does not serve itself go to the primary process at that Unix
    socket (gpupool.server.forward)."""
    own_store = store is None
    store = store or open_store(settings.database_url)
    loops = LoopGroup()
    ctx = AppContext(
        settings=settings,
        store=store,
        executor=executor,
        clock=clock,
        loops=loops,
        metrics=Metrics(store),
    )
    # node agents' GPU series are merged with the local telemetry's (one family per name)
    ctx.metrics.add_collector(AgentTelemetryCollector(ctx, telemetry))
    ctx.metrics.add_collector(BudgetCollector(store, clock.now))  # issue 35: budgets
    ctx.metrics.add_collector(NodePoolCollector(store))  # issue 34: node pools

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Sync endpoints run in anyio's worker threads (40 by default): see Settings.
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(1, settings.api_threads)
        if settings.start_loops:
            loops.start_all()
        try:
            yield
        finally:
            await loops.stop_all()
            executor.close()
            ctx.passwords.close()
            if own_store:
                store.close()

    app = FastAPI(**APP_INFO, lifespan=lifespan)
    app.state.ctx = ctx
    problems.install(app)
    if forward_to is not None:
        # added before BodyLimit, so BodyLimit (outside it) also limits forwarded bodies
        app.add_middleware(
            ForwardToPrimary, primary_socket=forward_to, after_change=ctx.auth_cache.clear
        )
    else:  # what the workers forward names its client (a no-op without workers)
        app.add_middleware(ClientFromWorker)
    app.add_middleware(problems.BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(problems.RefuseNul)
    add_routes(app)
    return app


#: the app's title, version and documentation URLs (also docs/openapi.json's)
APP_INFO: dict[str, Any] = {
    "title": "gpupool",
    "version": __version__,
    "description": "Pool GPUs and share them fairly among users and teams.",
    "openapi_url": f"{API_PREFIX}/openapi.json",
    "docs_url": f"{API_PREFIX}/docs",
    "redoc_url": None,
    "swagger_ui_oauth2_redirect_url": None,
}


def add_routes(app: FastAPI) -> None:
    """Every endpoint: the API under /api/v1, probes and metrics at the root."""
    for r in (
        accounts.router,
        tenants.router,
        cluster.router,
        agents.router,
        workloads.router,
        reports.router,
        profiles.router,
        nodepools.router,  # node pools (issue 34)
        budgets.router,  # budgets, reservations, chargeback (issue 35)
    ):
        app.include_router(r, prefix=API_PREFIX)
    app.include_router(system.router)
