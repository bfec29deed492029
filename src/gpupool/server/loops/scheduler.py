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

from gpupool.domain import Allocation, Workload, WorkloadState
from gpupool.executors.base import ExecState, ExecStatus, ExecutorError, Handle
from gpupool.scheduler import Decisions, SchedulerCache, Snapshot, cycle
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
#: Admissions committed (and then started) per write transaction.
ADMIT_BATCH = 8


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
            min_gap_s=ctx.settings.scheduler_min_gap_s,
        )
        self.ctx = ctx
        self.last: CycleReport | None = None
        #: what the scheduler carries from one cycle to the next (see gpupool.scheduler.cache)
        self.cache = SchedulerCache()
        #: pending workload id -> node where work was preempted for it (Snapshot.nominated);
        #: kept in memory like Kubernetes' nominatedNodeName (a restart forgets it: harmless)
        self.nominated: dict[str, str] = {}

    def snapshot(self) -> tuple[Snapshot, list]:
        with self.ctx.store.read() as s:
            nodes = tuple(NodeRepo(s).list())
            tree = TenantRepo(s).tree()
            running = tuple(AllocationRepo(s).running())
            pending = WorkloadRepo(s).pending()
            attained = UsageRepo(s).attained_by_tenant()
        waiting = {w.id for w in pending}
        self.nominated = {k: v for k, v in self.nominated.items() if k in waiting}
        snap = Snapshot(nodes, tree, running, attained, nominated=dict(self.nominated))
        return snap, pending

    def run_once(self) -> CycleReport:
        t0 = time.perf_counter()
        now = self.ctx.clock.now()
        snap, pending = self.snapshot()
        report = CycleReport()
        if pending or any(r.stopping for r in snap.running):
            decisions = cycle(snap, pending, now, self.ctx.settings.scheduler, self.cache)
            self.apply(decisions, snap, now, report)
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
    def apply(self, d: Decisions, snap: Snapshot, now: float, report: CycleReport) -> None:
        ctx = self.ctx
        for wid, reason in d.unschedulable.items():
            try:
                with ctx.store.write() as s:
                    WorkloadRepo(s).change_state(wid, S.FAILED, now, reason, expect={S.PENDING})
                report.failed.append(wid)
                ctx.metrics.decisions.labels("unschedulable").inc()
            except Conflict:
                pass  # cancelled meanwhile
        nodes = {r.workload.id: r.allocation.node for r in snap.running}
        for p in d.preemptions:
            if p.workload_id in nodes:
                self.nominated[p.for_workload] = nodes[p.workload_id]
            try:
                lifecycle.request_stop(ctx, p.workload_id, S.PREEMPTED, p.reason)
                report.preempted.append(p.workload_id)
                ctx.metrics.decisions.labels("preempted").inc()
            except Conflict:
                pass  # it ended meanwhile
        for a in d.admissions:
            self.nominated.pop(a.workload_id, None)
        todo = [(a.workload_id, a.allocation) for a in d.admissions]
        for i in range(0, len(todo), ADMIT_BATCH):  # short write transactions: API writes
            self._admit_all(todo[i : i + ADMIT_BATCH], now, report)  # interleave
        with ctx.store.write() as s:
            WorkloadRepo(s).set_pending_info(d.pending)
        report.pending = len(d.pending)

    def _admit_all(
        self, admissions: list[tuple[str, Allocation]], now: float, report: CycleReport
    ) -> None:
        """Commit the admissions (one transaction, a savepoint each), start them, then record
        the launches (one transaction)."""
        ctx = self.ctx
        committed: list[tuple[Workload, Allocation, str | None]] = []
        with ctx.store.write() as s:
            repo, allocs, users = WorkloadRepo(s), AllocationRepo(s), UserRepo(s)
            for wid, alloc in admissions:
                try:
                    with s.begin_nested():
                        allocs.allocate(alloc)
                        w = repo.change_state(
                            wid, S.ADMITTED, now, f"admitted {_describe(alloc)}", expect={S.PENDING}
                        )
                except Conflict as e:  # the store refused it: a GPU no longer has room, or raced
                    report.raced[wid] = str(e)
                    log.info("admission of %s not committed: %s", wid, e)
                    continue
                owner = users.find(w.owner)
                committed.append((w, alloc, owner.unix_user if owner else None))
        launched: list[tuple[str, Handle, ExecStatus | None]] = []
        for w, alloc, unix_user in committed:
            report.admitted.append(w.id)
            ctx.metrics.decisions.labels("admitted").inc()
            ctx.metrics.wait_seconds.labels(w.tenant, str(w.kind)).observe(
                max(0.0, now - w.submitted_at)
            )
            handle = self._start(w, alloc, unix_user, report)
            if handle is None:
                continue
            try:
                status: ExecStatus | None = ctx.executor.poll(w.id)
            except ExecutorError:
                status = None
            if status is not None and status.state is ExecState.UNKNOWN:
                status = None  # not visible yet (e.g. a pod being created): the reconciler follows
            launched.append((w.id, handle, status))
        if not launched:
            return
        cancelled: list[str] = []
        with ctx.store.write() as s:
            repo = WorkloadRepo(s)
            at = ctx.clock.now()
            for wid, handle, status in launched:
                try:
                    with s.begin_nested():
                        repo.set_executor_ref(wid, handle.ref)
                        repo.change_state(
                            wid,
                            S.STARTING,
                            at,
                            f"started by the {handle.executor} executor",
                            expect={S.ADMITTED},
                        )
                        if status is not None:
                            lifecycle.apply_status(s, repo.record(wid), status, at)
                    report.started.append(wid)
                except Conflict:  # cancelled while it was being started
                    cancelled.append(wid)
        for wid in cancelled:  # stop what was launched for nothing
            ctx.executor.stop(wid, "cancelled while starting", 0.0)

    def _start(
        self, w: Workload, alloc: Allocation, unix_user: str | None, report: CycleReport
    ) -> Handle | None:
        """Launch one admitted workload; on failure roll its admission back and requeue it."""
        ctx = self.ctx
        try:
            return ctx.executor.start(w, alloc if alloc.shares else None, unix_user=unix_user)
        except ExecutorError as e:
            reason, data = f"could not start: {e}; requeued", {"start_failed": True}
            report.start_failed[w.id] = str(e)
        except Exception as e:  # noqa: BLE001 - an executor bug must not leak the allocation
            log.exception("executor.start(%s) crashed", w.id)
            reason, data = f"could not start: {e!r}; requeued", {"start_failed": True}
            report.start_failed[w.id] = repr(e)
        ctx.metrics.decisions.labels("start_failed").inc()
        with ctx.store.write() as s:
            WorkloadRepo(s).change_state(w.id, S.PENDING, ctx.clock.now(), reason, data=data)
        return None
