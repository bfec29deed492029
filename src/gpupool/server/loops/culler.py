"""The culler loop: stops idle GPU holders and work past its max runtime, after a warning.

Rules, per running workload (work being stopped already is skipped):

- max runtime: once it has run `max_runtime_s`, it is stopped and becomes `culled`; a
  `workload.cull_warning` event comes `warn_before_s` earlier (a notebook's user sees it on
  the hub's pages). The max runtime is the declared one or the runtime policy's
  (`domain.runtime`, applied at submission). The stop is the polite signal, then
  `stop_grace_s` before the kill (the grace, docs/admin-guide.md "Runtime policy").
- idle: a workload holding GPUs whose tenant (or nearest ancestor) sets `idle_timeout_s`
  is culled once all of its GPUs have been idle that long, with a warning `warn_before_s`
  earlier. Idleness comes from telemetry (`idle_seconds(allocation)`); no telemetry means
  no evidence, and nothing is culled. A busy holder is never culled, and becoming busy
  again clears the warning. CPU-only work is never culled for idleness.

Stopping goes through `services.lifecycle.request_stop(..., culled, reason)`, so the reason
is recorded and the GPUs stay held until the work has really ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.domain import Allocation, Event, TenantTree, Workload, WorkloadState
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.server.services import lifecycle
from gpupool.store import AllocationRepo, Conflict, EventRepo, TenantRepo

log = logging.getLogger(__name__)
S = WorkloadState


def _dur(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def idle_timeout(tree: TenantTree, tenant: str) -> float | None:
    """The tenant's idle timeout, inherited from the nearest ancestor that sets one."""
    if tenant not in tree:
        return None
    for name in tree.ancestors(tenant):
        t = tree.get(name).idle_timeout_s
        if t is not None:
            return t
    return None


def _warned_before(events: EventRepo, w: Workload) -> bool:
    """Whether this run of `w` already got its runtime warning (one stored since it started)."""
    for _, ev in events.list(workload_id=w.id, kind="workload.cull_warning", limit=20):
        if ev.data.get("why") == "runtime" and ev.at >= (w.started_at or 0.0):
            return True
    return False


@dataclass
class CullReport:
    warned: list[str] = field(default_factory=list)
    culled: dict[str, str] = field(default_factory=dict)


class CullerLoop(Loop):
    name = "culler"

    def __init__(
        self,
        ctx: AppContext,
        idle_seconds: Callable[[Allocation], float | None] | None = None,
        *,
        warn_before_s: float = 600.0,
        interval_s: float = 30.0,
    ):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.idle_seconds = idle_seconds or (lambda a: None)
        self.warn_before_s = warn_before_s
        self._warned: set[tuple[str, str]] = set()

    def run_once(self) -> CullReport:
        ctx = self.ctx
        now = ctx.clock.now()
        report = CullReport()
        with ctx.store.read() as s:
            running = AllocationRepo(s).running()
            tree = TenantRepo(s).tree()
        live = set()
        for rw in running:
            w, a = rw.workload, rw.allocation
            live.add(w.id)
            if rw.stopping or w.state is not S.RUNNING:
                continue
            if self._check_runtime(w, now, report):
                continue
            self._check_idle(w, a, idle_timeout(tree, w.tenant), now, report)
        self._warned = {k for k in self._warned if k[0] in live}
        return report

    def _check_runtime(self, w: Workload, now: float, report: CullReport) -> bool:
        if w.max_runtime_s is None or w.started_at is None:
            return False
        ran = now - w.started_at
        if ran >= w.max_runtime_s:
            return self._cull(
                w, f"ran for {_dur(ran)}, past its max runtime of {_dur(w.max_runtime_s)}", report
            )
        if ran >= w.max_runtime_s - self.warn_before_s:
            self._warn(
                w,
                "runtime",
                f"will be stopped in {_dur(w.max_runtime_s - ran)}: its max runtime is "
                f"{_dur(w.max_runtime_s)}",
                now,
                report,
            )
        return False

    def _check_idle(
        self, w: Workload, a: Allocation, timeout: float | None, now: float, report: CullReport
    ) -> None:
        if timeout is None or not a.shares:
            return
        idle = self.idle_seconds(a)
        if idle is None or idle <= 0:
            self._warned.discard((w.id, "idle"))  # busy (or unknown): never culled
            return
        if idle >= timeout:
            self._cull(
                w,
                f"its GPUs were idle for {_dur(idle)}; tenant {w.tenant} stops GPU holders "
                f"idle for {_dur(timeout)}",
                report,
            )
        elif idle >= timeout - self.warn_before_s:
            self._warn(
                w,
                "idle",
                f"its GPUs have been idle for {_dur(idle)}; it will be stopped in "
                f"{_dur(timeout - idle)} unless it uses them",
                now,
                report,
            )

    def _warn(self, w: Workload, why: str, message: str, now: float, report: CullReport) -> None:
        if (w.id, why) in self._warned:
            return
        self._warned.add((w.id, why))
        with self.ctx.store.write() as s:
            if why == "runtime" and _warned_before(EventRepo(s), w):
                return  # warned before a restart: the runtime's end has not moved
            EventRepo(s).add(
                Event(
                    at=now,
                    kind="workload.cull_warning",
                    message=f"workload {w.id} {message}",
                    workload_id=w.id,
                    tenant=w.tenant,
                    user=w.owner,
                    data={"why": why},
                )
            )
        report.warned.append(w.id)

    def _cull(self, w: Workload, reason: str, report: CullReport) -> bool:
        try:
            lifecycle.request_stop(self.ctx, w.id, S.CULLED, reason)
        except Conflict:
            return False  # it ended meanwhile
        log.info("culling %s: %s", w.id, reason)
        report.culled[w.id] = reason
        return True
