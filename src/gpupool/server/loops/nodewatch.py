"""The node-watch loop: a node whose agent stopped reporting becomes `unknown`.

Each pass asks `gpupool.server.services.agents.mark_lost`, which compares every agent's last
report with the server's clock (injected: tests move a `ManualClock`). Nodes without an agent
(the local engine's own node, sampled in-process) are never touched.
"""

from __future__ import annotations

from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.server.services.agents import mark_lost


class NodeWatchLoop(Loop):
    name = "nodewatch"

    def __init__(self, ctx: AppContext, interval_s: float = 1.0):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx

    def run_once(self) -> list[str]:
        """The nodes turned `unknown` by this pass."""
        return mark_lost(self.ctx)
