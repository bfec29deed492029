"""The reconciler loop: executor truth -> workload states.

Each pass:

1. `executor.tick()` (overdue stops are escalated to a forced kill);
2. every active workload in the store (admitted, starting, running) is polled and the
   status applied through `services.lifecycle.apply_status` (the one place that turns an
   `ExecStatus` into state changes): running work stays or becomes `running`, ended work
   gets its real exit state, work the executor no longer knows becomes `lost`;
3. a stop that the store recorded but the executor never received (the server died in
   between) is sent again;
4. admitted work the executor never launched (the server died between admission and start)
   is requeued once it is older than `launch_grace_s`;
5. live work the store does not hold as active (e.g. cancelled while no server ran) is
   stopped: gpupool never leaves unaccounted work on a GPU;
6. once an hour, the executor's state and logs of work that ended `keep_finished_s` ago
   (30 days) are removed;
7. with the engines' MPS daemons (`MPSDaemons`, one set per node), those of each node's
   `shared` GPUs are kept up;
8. the enforcement the executor really applied (e.g. `policed` instead of `mps` when no
   healthy daemon could serve the job's Unix user) replaces what the scheduler asked for on
   the allocation's shares, with a `workload.enforcement` event: never claim more than is
   enforced.

After a restart the first pass adopts running work: the local executor still sees it, so it
is neither restarted (the scheduler only starts `pending` work) nor lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.domain import Enforcement, Event, SharingMode, WorkloadKind, WorkloadState
from gpupool.engines.common.engine import MPSDaemons
from gpupool.engines.common.executor import (
    ExecState,
    ExecutorError,
    ExecutorWithPruning,
    ExecutorWithSharedGPUs,
)
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.server.services import lifecycle
from gpupool.store import (
    AllocationRepo,
    Conflict,
    EventRepo,
    NodeRepo,
    NotFound,
    WorkloadRepo,
)

log = logging.getLogger(__name__)
S = WorkloadState


@dataclass
class ReconcileReport:
    """What one pass changed, by workload id -> new state (for tests and logs)."""

    changed: dict[str, str] = field(default_factory=dict)
    adopted: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    stops_resent: list[str] = field(default_factory=list)
    orphans_stopped: list[str] = field(default_factory=list)
    mps: dict[str, bool] = field(default_factory=dict)
    enforcement_corrected: dict[str, dict[str, str]] = field(default_factory=dict)
    #: notebooks whose server runs but reported no endpoint yet (the hub waits for it)
    awaiting_endpoint: list[str] = field(default_factory=list)


class ReconcilerLoop(Loop):
    name = "reconciler"
    #: while a notebook's server runs without a reported endpoint (it is starting, and the
    #: hub's spawner waits for it: gpupool.jupyterhub.spawner), passes come this often, for
    #: at most `endpoint_watch_s` after its start (a notebook that never listens is watched
    #: at the usual pace)
    endpoint_interval_s = 0.25
    endpoint_watch_s = 120.0

    def __init__(
        self,
        ctx: AppContext,
        *,
        interval_s: float = 2.0,
        launch_grace_s: float = 60.0,
        keep_finished_s: float = 30 * 86400.0,
        mps: MPSDaemons | None = None,
        node: str | None = None,
        daemons: Sequence[tuple[MPSDaemons, str | None]] = (),
    ):
        """`daemons`: each engine's MPS daemons with the node they serve (None: every
        node); `mps` and `node` are one more of them."""
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.base_interval_s = interval_s
        self.launch_grace_s = launch_grace_s
        self.keep_finished_s = keep_finished_s
        self._last_prune: float | None = None
        self.daemons = list(daemons) + ([(mps, node)] if mps is not None else [])
        self._seen_running: set[str] = set()
        #: workload id -> its admitted_at when its enforcement was last synced (no re-reads)
        self._synced_at: dict[str, float | None] = {}
        self._runs = 0
        self.last: ReconcileReport | None = None

    def run_once(self) -> ReconcileReport:
        ctx = self.ctx
        report = ReconcileReport()
        ctx.executor.tick()
        with ctx.store.read() as s:
            records = WorkloadRepo(s).list(states=(S.ADMITTED, S.STARTING, S.RUNNING))
        active = {r.workload.id for r in records}
        self._synced_at = {k: v for k, v in self._synced_at.items() if k in active}
        for rec in records:
            self._reconcile_one(rec, report)
        self._stop_orphans(active, report)
        if self.daemons:
            report.mps = self._keep_mps()
        self._prune()
        self._runs += 1
        soon = min(self.base_interval_s, self.endpoint_interval_s)
        self.interval_s = soon if report.awaiting_endpoint else self.base_interval_s
        if report.adopted:
            log.info("reconciler: adopted running work %s", ", ".join(report.adopted))
        if report.changed or report.requeued or report.orphans_stopped:
            log.info("reconciler: %s", report)
            ctx.wake_scheduler()
        self.last = report
        return report

    def _reconcile_one(self, rec, report: ReconcileReport) -> None:  # noqa: ANN001
        ctx = self.ctx
        w = rec.workload
        try:
            status = ctx.executor.poll(w.id)
        except ExecutorError as e:
            log.warning("polling %s failed: %s", w.id, e)
            return
        now = ctx.clock.now()
        if (  # before the allocation is released
            status.state is not ExecState.UNKNOWN
            and self._synced_at.get(w.id) != w.admitted_at
            and self._sync_enforcement(w.id, report)
        ):
            self._synced_at[w.id] = w.admitted_at
        if status.state.alive and w.id not in self._seen_running:
            self._seen_running.add(w.id)
            if self._runs == 0:
                report.adopted.append(w.id)
        if (
            w.kind is WorkloadKind.NOTEBOOK
            and status.state is ExecState.RUNNING
            and not (status.endpoint or rec.endpoint)
            and now - (status.started_at or w.admitted_at or now) < self.endpoint_watch_s
        ):
            report.awaiting_endpoint.append(w.id)
        if rec.stopping is not None and status.state.alive and status.stop_reason is None:
            try:
                ctx.executor.stop(w.id, rec.stopping[1], ctx.settings.stop_grace_s)
                report.stops_resent.append(w.id)
            except ExecutorError as e:
                log.warning("re-sending the stop of %s failed: %s", w.id, e)
        if (
            status.state is ExecState.UNKNOWN
            and w.state is S.ADMITTED
            and rec.stopping is None
            and w.admitted_at is not None
            and now - w.admitted_at >= self.launch_grace_s
        ):
            try:
                with ctx.store.write() as s:
                    WorkloadRepo(s).change_state(
                        w.id,
                        S.PENDING,
                        now,
                        "admitted but never launched (the server stopped in between); requeued",
                        expect={S.ADMITTED},
                    )
                report.requeued.append(w.id)
            except Conflict:
                pass
            return
        if not lifecycle.would_change(rec, status):
            return  # nothing to write (the common case: running work still runs)
        try:
            with ctx.store.write() as s:
                fresh = WorkloadRepo(s).record(w.id)
                new = lifecycle.apply_status(s, fresh, status, now)
        except (Conflict, NotFound):
            return  # changed meanwhile (cancelled, settled by the scheduler): next pass
        if new.state is not w.state:
            report.changed[w.id] = str(new.state)
            if not new.active:
                self._seen_running.discard(w.id)

    def _sync_enforcement(self, workload_id: str, report: ReconcileReport) -> bool:
        """Record on the allocation the enforcement the executor really applied. True when
        that is settled for the current allocation (no need to look again)."""
        executor = self.ctx.executor
        if not isinstance(executor, ExecutorWithSharedGPUs):
            return True  # the executor applies what the allocation asks
        applied = executor.enforcement_of(workload_id)
        if applied is None:
            return True  # the executor applies what the allocation asks
        with self.ctx.store.read() as s:
            alloc = AllocationRepo(s).active_for(workload_id)
        if alloc is None:
            return False
        shares = {sh.gpu_uuid: str(sh.enforcement) for sh in alloc.shares}
        if not applied:
            return False  # not launched by this executor (yet)
        changes = {u: str(e) for u, e in applied.items() if u in shares and shares[u] != str(e)}
        if not changes:
            return True
        with self.ctx.store.write() as s:
            AllocationRepo(s).set_enforcement(
                workload_id, {u: Enforcement(e) for u, e in changes.items()}
            )
            w = WorkloadRepo(s).get(workload_id)
            what = ", ".join(f"GPU {u}: {shares[u]} -> {e}" for u, e in changes.items())
            EventRepo(s).add(
                Event(
                    at=self.ctx.clock.now(),
                    kind="workload.enforcement",
                    message=f"the executor enforces this share differently than planned ({what})",
                    workload_id=workload_id,
                    tenant=w.tenant,
                    user=w.owner,
                    data={"enforcement": changes},
                )
            )
        report.enforcement_corrected[workload_id] = changes
        return True

    def _stop_orphans(self, active: set[str], report: ReconcileReport) -> None:
        ctx = self.ctx
        try:
            running = ctx.executor.list_running()
        except ExecutorError as e:
            log.warning("listing the executor's work failed: %s", e)
            return
        for rp in running:
            if rp.workload_id in active:
                continue
            # re-check: it may have been admitted since we listed the active workloads
            with ctx.store.read() as s:
                try:
                    current = WorkloadRepo(s).get(rp.workload_id)
                except NotFound:
                    current = None
            if current is not None and current.active:
                continue
            why = (
                f"workload {rp.workload_id} is {current.state} in the store"
                if current is not None
                else f"no workload {rp.workload_id} in the store"
            )
            log.warning("stopping orphaned work: %s but its process runs", why)
            ctx.executor.stop(rp.workload_id, f"orphaned: {why}", ctx.settings.stop_grace_s)
            with ctx.store.write() as s:
                EventRepo(s).add(
                    Event(
                        at=ctx.clock.now(),
                        kind="executor.orphan_stopped",
                        message=f"stopped work that gpupool does not hold as active: {why}",
                        workload_id=rp.workload_id if current is not None else None,
                        tenant=current.tenant if current is not None else None,
                        user=current.owner if current is not None else None,
                        data={"ref": rp.ref},
                    )
                )
            report.orphans_stopped.append(rp.workload_id)

    def _prune(self) -> None:
        """Hourly: drop executor state (and logs) of work that ended `keep_finished_s` ago."""
        now = self.ctx.clock.now()
        if self._last_prune is not None and now - self._last_prune < 3600:
            return
        self._last_prune = now
        if not isinstance(self.ctx.executor, ExecutorWithPruning):
            return  # it keeps nothing of ended work
        removed = self.ctx.executor.prune(self.keep_finished_s)
        if removed:
            log.info("reconciler: removed the state and logs of %d old jobs", len(removed))

    def _keep_mps(self) -> dict[str, bool]:
        """Keep a daemon for each `shared` GPU of each daemons' node; stop the others'."""
        with self.ctx.store.read() as s:
            gpus = NodeRepo(s).gpus()
        healthy: dict[str, bool] = {}
        for daemons, only in self.daemons:
            shared = [
                g.uuid
                for node, g in gpus
                if g.sharing is SharingMode.SHARED and (only is None or node == only)
            ]
            daemons.manage(shared)
            healthy.update(daemons.ensure_all())
        return healthy
