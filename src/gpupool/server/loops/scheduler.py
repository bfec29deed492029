"""The scheduler loop: snapshot from the store -> `scheduler.cycle()` -> apply the decisions.

Applying is "assume, then commit": each admission is committed on its own (allocation +
`admitted`, refused by the store if a GPU no longer has room), then the executor starts the
work; if it cannot, the admission is rolled back and the workload requeued with the reason.
Preemptions stop the victim through `services.lifecycle` (its GPUs stay held until the work
has ended). Work no node could ever hold fails with the scheduler's reason. Every other
pending workload gets its why-pending and queue positions stored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from gpupool.domain import Allocation, WorkloadState
from gpupool.executors.base import ExecutorError
from gpupool.scheduler import Decisions, Snapshot, cycle
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.server.services import lifecycle
from gpupool.store import (
    AllocationRepo,
    Conflict,
    NodeRepo,
    TenantRepo,
    UsageRepo,
    UserRepo,
    WorkloadRepo,
)

log = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class CycleReport:
    """What one pass did (for tests, logs and the bench)."""

    admitted: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    start_failed: dict[str, str] = field(default_factory=dict)
    raced: dict[str, str] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    pending: int = 0
    seconds: float = 0.0


def _describe(a: Allocation) -> str:
    if not a.shares:
        return f"on {a.node} (CPU only)"
    gpus = ", ".join(
        f"GPU {s.gpu_index}" + ("" if s.whole else f" ({s.milli / 1000:g}, {s.enforcement})")
        for s in a.shares
    )
    return f"on {a.node}: {gpus}"


class SchedulerLoop(Loop):
    name = "scheduler"

    def __init__(self, ctx: AppContext):
        super().__init__(
            ctx.settings.scheduler_interval_s,
            on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc(),
        )
        self.ctx = ctx
        self.last: CycleReport | None = None

    def snapshot(self) -> tuple[Snapshot, list]:
        with self.ctx.store.read() as s:
            nodes = tuple(NodeRepo(s).list())
            tree = TenantRepo(s).tree()
            running = tuple(AllocationRepo(s).running())
            pending = WorkloadRepo(s).pending()
            attained = UsageRepo(s).attained_by_tenant()
        return Snapshot(nodes, tree, running, attained), pending

    def run_once(self) -> CycleReport:
        t0 = time.perf_counter()
        now = self.ctx.clock.now()
        snap, pending = self.snapshot()
        report = CycleReport()
        if pending or any(r.stopping for r in snap.running):
            decisions = cycle(snap, pending, now, self.ctx.settings.scheduler)
            self.apply(decisions, now, report)
        report.seconds = time.perf_counter() - t0
        self.ctx.metrics.cycle_seconds.observe(report.seconds)
        self.last = report
        if report.admitted or report.preempted or report.failed or report.start_failed:
            log.info(
                "cycle: admitted %d, start failed %d, preempted %d, failed %d, pending %d (%.1fms)",
                len(report.admitted),
                len(report.start_failed),
                len(report.preempted),
                len(report.failed),
                report.pending,
                report.seconds * 1000,
            )
        return report

    # -- applying decisions ---------------------------------------------------------------
    def apply(self, d: Decisions, now: float, report: CycleReport) -> None:
        ctx = self.ctx
        for wid, reason in d.unschedulable.items():
            try:
                with ctx.store.write() as s:
                    WorkloadRepo(s).change_state(wid, S.FAILED, now, reason, expect={S.PENDING})
                report.failed.append(wid)
                ctx.metrics.decisions.labels("unschedulable").inc()
            except Conflict:
                pass  # cancelled meanwhile
        for p in d.preemptions:
            try:
                lifecycle.request_stop(ctx, p.workload_id, S.PREEMPTED, p.reason)
                report.preempted.append(p.workload_id)
                ctx.metrics.decisions.labels("preempted").inc()
            except Conflict:
                pass  # it ended meanwhile
        for adm in d.admissions:
            self._admit(adm.workload_id, adm.allocation, now, report)
        with ctx.store.write() as s:
            WorkloadRepo(s).set_pending_info(d.pending)
        report.pending = len(d.pending)

    def _admit(self, wid: str, alloc: Allocation, now: float, report: CycleReport) -> None:
        ctx = self.ctx
        # 1. commit the admission (the store refuses it if a GPU no longer has room)
        try:
            with ctx.store.write() as s:
                AllocationRepo(s).allocate(alloc)
                w = WorkloadRepo(s).change_state(
                    wid, S.ADMITTED, now, f"admitted {_describe(alloc)}", expect={S.PENDING}
                )
                owner = UserRepo(s).find(w.owner)
        except Conflict as e:
            report.raced[wid] = str(e)
            log.info("admission of %s not committed: %s", wid, e)
            return
        report.admitted.append(wid)
        ctx.metrics.decisions.labels("admitted").inc()
        # 2. start it; on failure roll the admission back and requeue
        try:
            handle = ctx.executor.start(
                w,
                alloc if alloc.shares else None,
                unix_user=owner.unix_user if owner and owner.unix_user else None,
            )
        except ExecutorError as e:
            report.start_failed[wid] = str(e)
            ctx.metrics.decisions.labels("start_failed").inc()
            with ctx.store.write() as s:
                WorkloadRepo(s).change_state(
                    wid,
                    S.PENDING,
                    ctx.clock.now(),
                    f"could not start: {e}; requeued",
                    data={"start_failed": True},
                )
            return
        except Exception as e:  # noqa: BLE001 - an executor bug must not leak the allocation
            log.exception("executor.start(%s) crashed", wid)
            report.start_failed[wid] = repr(e)
            with ctx.store.write() as s:
                WorkloadRepo(s).change_state(
                    wid, S.PENDING, ctx.clock.now(), f"could not start: {e!r}; requeued"
                )
            return
        try:
            with ctx.store.write() as s:
                repo = WorkloadRepo(s)
                repo.set_executor_ref(wid, handle.ref)
                repo.change_state(
                    wid,
                    S.STARTING,
                    ctx.clock.now(),
                    f"started by the {handle.executor} executor",
                    expect={S.ADMITTED},
                )
        except Conflict:  # cancelled while it was being started: stop what was launched
            ctx.executor.stop(wid, "cancelled while starting", 0.0)
            return
        report.started.append(wid)
        try:
            lifecycle.settle(ctx, wid)
        except (ExecutorError, Conflict):
            log.exception("polling %s after its start failed; the reconciler will retry", wid)
