"""The checkpoint loop (SQLite only): copies the write-ahead log into the database file every
second, so that no writer pays for it (see `Store.checkpoint`). The server's processes open
SQLite with `wal_autocheckpoint=False`; only the process that runs the loops checkpoints."""

from __future__ import annotations

from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop


class CheckpointLoop(Loop):
    name = "checkpoint"

    def __init__(self, ctx: AppContext, interval_s: float = 1.0):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx

    def run_once(self) -> None:
        self.ctx.store.checkpoint()
