"""The inventory loop: one engine's nodes, re-read and registered.

Every `engine.inventory_interval_s` (or at the next pass once `engine.inventory_due()`) the
loop reads the engine's nodes through `read` (the system's: labelled with the engine, checked
against the other engines' node names) and registers them: capacity, state, health. New
nodes join the nodes work may be placed on; nodes that disappear stay registered. Each pass
also hands the engine the tenants and memberships (`sync_tenants`). With several engines each
has its own loop, named ``inventory-<engine>``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from gpupool.domain import Node
from gpupool.engines.common.engine import Engine, EngineError
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store import Store, TenantRepo, UserRepo

log = logging.getLogger(__name__)


def sync_tenants(store: Store, engine: Engine) -> None:
    """Hand the engine the tenants and memberships (it applies its per-tenant objects)."""
    with store.read() as tx:
        tree = TenantRepo(tx).tree()
        memberships = UserRepo(tx).memberships()
    engine.sync_tenants(tree, memberships)


class InventoryLoop(Loop):
    """Re-reads one engine's nodes and registers them (see the module docstring). `read`
    returns the nodes to register (default: `engine.inventory()`)."""

    name = "inventory"

    def __init__(
        self,
        ctx: AppContext,
        engine: Engine,
        *,
        read: Callable[[], list[Node]] | None = None,
        name: str = "inventory",
    ):
        every = engine.inventory_interval_s or 10.0
        self.name = name
        super().__init__(
            min(every, ctx.settings.reconciler_interval_s),
            on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc(),
        )
        self.ctx, self.engine, self.every = ctx, engine, every
        self.read = read or engine.inventory
        self._last: float | None = None

    def run_once(self) -> list[str]:
        """Re-read the nodes when due; returns the names registered (empty: not due)."""
        from gpupool.server.bootstrap import register_node

        sync_tenants(self.ctx.store, self.engine)
        now = self.ctx.clock.now()
        fresh = self._last is not None and now - self._last < self.every
        if fresh and not self.engine.inventory_due():
            return []
        self._last = now
        try:
            nodes = self.read()
        except EngineError as e:
            log.warning("re-reading the %s engine's nodes failed: %s", self.engine.name, e)
            return []
        for node in nodes:
            register_node(self.ctx.store, dataclasses.replace(node, last_heartbeat=now))
        if self.ctx.work_nodes is not None:
            self.ctx.work_nodes = self.ctx.work_nodes | {n.name for n in nodes}
        return [n.name for n in nodes]
