"""The scheduler loop: snapshot from the store -> `scheduler.cycle()` -> apply the decisions.

The snapshot's `attained_service` holds the tenants' usage under their names and, under a
workload's id, the service it kept from earlier attempts (checkpointing work preempted and
requeued; `gpupool.store.attained`), as the simulator passes them. Its `service_scale` is
the pool's run-length scale for relative service levels
(`SchedulerConfig.service_levels_relative`): the loop keeps a `LevelScale` and estimates it
again at most every `ESTIMATE_EVERY_S` (300 s) from the last `service_levels_window`
workloads to start (`gpupool.store.attained.recent_runs`), as the simulator does from its
replay; until there is an estimate (fewer than 50 finished runs) the scale is 0 and the
absolute `service_levels_s` apply.

Applying is "assume, then commit": each admission is committed all or nothing (allocation +
`admitted`, refused by the store if a GPU no longer has room; `store.AdmissionRepo`, a few
admissions per write transaction), then the executor starts the work. If it cannot, the
admission is rolled back and `settings.start_retry` decides (`domain.retries`): a permanent
error fails the workload with the message; a transient one requeues it, but it sits out the
cycles until its `retry_at` (a wait that doubles with each failure) and fails after
`max_attempts` failures in a row. Meanwhile it reserves nothing and
the work behind it is admitted: one workload that cannot start never blocks the pool. Each
failure is one log line.
Preemptions stop the victim through `services.lifecycle` (its GPUs stay held until the work
has ended). Work no node could ever hold fails with the scheduler's reason. Every other
pending workload gets its why-pending and queue positions stored.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter

from gpupool.domain import Allocation, Workload, WorkloadState
from gpupool.domain.retries import backing_off, retry_reason
from gpupool.engines.common.executor import ExecState, ExecStatus, ExecutorError, Handle, StartError
from gpupool.scheduler import Decisions, SchedulerCache, Snapshot
from gpupool.scheduler.advance import planned_stops
from gpupool.scheduler.followup import Nominations
from gpupool.scheduler.levels import ladder
from gpupool.scheduler.levelscale import ESTIMATE_EVERY_S, LevelScale
from gpupool.scheduler.timed import cycle_timed
from gpupool.scheduler.timerules import TimeRules
from gpupool.scheduler.types import PendingInfo, Policy
from gpupool.server.context import AppContext
from gpupool.server.loops.autoscale import node_pool_demand
from gpupool.server.loops.base import Loop
from gpupool.server.loops.snapshot import SnapshotReader
from gpupool.server.services import budgets, lifecycle, notebooks
from gpupool.server.services.reservations import NOTICE_S, notify_stops
from gpupool.server.webhook import Webhook
from gpupool.store import (
    AdmissionRepo,
    Conflict,
    Launch,
    LaunchRepo,
    UserRepo,
    WorkloadRepo,
    recent_runs,
)
from gpupool.store.launches import ALREADY_STARTED
from gpupool.store.workloads import StoredInfo

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
    #: workloads whose start failed for good (permanent error or out of tries) -> reason
    start_gave_up: dict[str, str] = field(default_factory=dict)
    #: pending workloads left out of this cycle: their start failed, they retry later
    backing_off: list[str] = field(default_factory=list)
    pending: int = 0
    seconds: float = 0.0


def _describe(a: Allocation) -> str:
    if not a.shares:
        return f"on {a.node} (CPU only)"
    if a.multi_node:
        per = len(a.on_node(a.node))
        return f"on {len(a.nodes)} nodes, {per} GPUs each: {', '.join(a.nodes)}"
    gpus = ", ".join(
        f"GPU {s.gpu_index}" + ("" if s.whole else f" ({s.milli / 1000:g}, {s.enforcement})")
        for s in a.shares
    )
    return f"on {a.node}: {gpus}"


def read_snapshot(ctx: AppContext) -> tuple[Snapshot, list[Workload]]:
    """What a cycle sees, read in one transaction, and the pending work: the nodes that run
    work, the tenants, the running work, and `attained_service` (see the module). Without
    nominations: the scheduler loop keeps those (`SchedulerLoop.snapshot`). The loop's own
    read, every object new: a reader that reuses nothing (gpupool.server.loops.snapshot)."""
    snap, pending, _ = SnapshotReader(reuse=False).read(ctx)
    return snap, pending


def _waiting(snap: Snapshot, pending: list[Workload]) -> set[str]:
    """The work whose nominations last: pending, or still stopping to be moved."""
    return {w.id for w in pending} | {r.workload.id for r in snap.running if r.stopping}


_first = itemgetter(0)


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
        #: the snapshot read, reusing the objects of unchanged rows (gpupool.server.loops.snapshot)
        self.reader = SnapshotReader()
        #: pending workload id -> nodes where work was preempted for it (Snapshot.nominated),
        #: kept as the simulator keeps them (gpupool.scheduler.followup)
        self.nominations = Nominations()
        #: workloads whose start failed in the current pass and that will retry
        self._retrying: list[Workload] = []
        #: (budget id, period) spent and announced (the store remembers across restarts)
        self._announced: set[tuple[int, str]] = set()
        #: where a spent budget is also announced with a JSON POST (None: nowhere)
        url = ctx.settings.budget_webhook_url
        self.webhook = Webhook(url) if url else None
        #: (workload id, reservation id) told of a stop at the reservation's start
        self._noticed: set[tuple[str, str]] = set()
        #: the pool's run-length scale (relative service levels; Snapshot.service_scale)
        self.level_scale = LevelScale()
        #: when the scale was last estimated (the loop's clock)
        self._scaled_at = float("-inf")

    @property
    def nominated(self) -> dict[str, tuple[str, ...]]:
        """The nominations kept now (workload id -> nodes)."""
        return self.nominations.nodes

    def snapshot(self) -> tuple[Snapshot, list[Workload]]:
        """What a cycle would see now, for other loops (the MIG re-layout's thread) and tests:
        a fresh read (`read_snapshot`) with the nominations of the work it finds waiting.
        Touches neither the loop's reader nor its nominations (another thread may be in a
        cycle)."""
        snap, pending = read_snapshot(self.ctx)
        waiting = _waiting(snap, pending)
        nominated = self.nominations.of(waiting)
        scale = self.level_scale.scale
        return dataclasses.replace(snap, nominated=nominated, service_scale=scale), pending

    def _read(self, now: float) -> tuple[Snapshot, list[Workload], dict[str, StoredInfo] | None]:
        """This cycle's read through the loop's reader (gpupool.server.loops.snapshot): the
        snapshot with its nominations and the service scale, the pending work, and the
        why-pending it read."""
        snap, pending, stored = self.reader.read(self.ctx)
        # a nomination lasts while its workload waits, or is still stopping to be moved
        nominated = self.nominations.for_snapshot(_waiting(snap, pending))
        scale = self.service_scale(now)
        return dataclasses.replace(snap, nominated=nominated, service_scale=scale), pending, stored

    def service_scale(self, now: float) -> float:
        """The run-length scale of relative service levels (GPU-seconds; 0: none yet, the
        absolute levels apply), estimated again from the store when `ESTIMATE_EVERY_S` have
        passed since the last estimate (`LevelScale`: it moves only beyond the hysteresis).
        0 without relative levels (or service levels, or the `fair` policy)."""
        cfg = self.ctx.settings.scheduler
        relative = cfg.service_levels_relative and cfg.service_levels_s
        if not relative or cfg.policy is not Policy.FAIR:
            return 0.0
        if not self._scaled_at <= now < self._scaled_at + ESTIMATE_EVERY_S:
            self._scaled_at = now
            with self.ctx.store.read() as s:
                runs = recent_runs(s, cfg.service_levels_window, now)
            scale = self.level_scale
            if scale.update(runs, cfg.service_levels_quantile, cfg.service_levels_hysteresis):
                log.info(
                    "service levels: p%g run length %.0f GPU-seconds, levels at %s GPU-seconds",
                    cfg.service_levels_quantile * 100,
                    scale.scale,
                    ", ".join(f"{x:g}" for x in ladder(cfg, scale.scale)),
                )
        return self.level_scale.scale

    def time_rules(self, now: float) -> TimeRules:
        """Budgets (where each stands this period) and the reservations not yet over, from
        the store; a budget spent this period is announced once (`budget.spent` event, and
        the webhook's POST, queued for its thread: never waited on here)."""
        with self.ctx.store.read() as s:
            rules, states = budgets.time_rules(s, now)
        spent = {(i, st.period.label) for i, st in states if st.over} - self._announced
        if spent:
            with self.ctx.store.write() as s:
                told = budgets.announce(s, states, now)
            self._announced |= spent
            if self.webhook is not None:
                for e in told:
                    self.webhook.send(budgets.webhook_payload(e))
        return rules

    def reservation_notices(self, snap: Snapshot, rules: TimeRules, now: float) -> None:
        """Tell running work a reservation starting soon will stop (once per workload and
        reservation: `workload.reservation_notice`, gpupool.server.services.reservations)."""
        live = rules.reservations
        if not any(now < r.start <= now + NOTICE_S for r in live):
            return
        stops = planned_stops(live, snap.nodes, snap.running, now, NOTICE_S)
        todo = {(rw.workload.id, r.id) for rw, r in stops} - self._noticed
        if todo:
            with self.ctx.store.write() as s:
                notify_stops(s, live, snap.nodes, snap.running, now)
            self._noticed |= todo

    def run_once(self) -> CycleReport:
        t0 = time.perf_counter()
        now = self.ctx.clock.now()
        snap, pending, stored = self._read(now)
        report = CycleReport()
        waiting = [w for w in pending if backing_off(w.retry_at, now)]
        if waiting:  # their start failed: not considered (nor reserving) until retry_at
            later = {w.id for w in waiting}
            pending = [w for w in pending if w.id not in later]
            report.backing_off = [w.id for w in waiting]
        rules = self.time_rules(now)  # issue 35: budgets and advance reservations
        self.reservation_notices(snap, rules, now)
        if pending or waiting or rules.reservations or any(r.stopping for r in snap.running):
            decisions = cycle_timed(
                snap, pending, now, self.ctx.settings.scheduler, self.cache, rules
            )
            # node pools (issue 34): work waiting for a pool's node, its reasons; see autoscale
            decisions = node_pool_demand(self.ctx, snap, pending, decisions, now, rules)
            self.apply(decisions, snap, now, report, pending, waiting, stored)
        report.seconds = time.perf_counter() - t0
        self.ctx.metrics.cycle_seconds.observe(report.seconds)
        self.last = report
        if report.started or report.preempted or report.failed:  # start failures: their own line
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
    def apply(
        self,
        d: Decisions,
        snap: Snapshot,
        now: float,
        report: CycleReport,
        considered: list[Workload] | None = None,
        waiting: list[Workload] | None = None,
        stored: dict[str, StoredInfo] | None = None,
    ) -> None:
        """Apply the cycle's decisions. `considered` are the pending workloads the cycle
        decided on, `waiting` those it left out (backing off after a failed start);
        `stored` the why-pending this cycle's read saw (None: compare with the rows)."""
        ctx = self.ctx
        for wid, reason in d.unschedulable.items():
            try:
                with ctx.store.write() as s:
                    WorkloadRepo(s).change_state(wid, S.FAILED, now, reason, expect={S.PENDING})
                report.failed.append(wid)
                ctx.metrics.decisions.labels("unschedulable").inc()
            except Conflict:
                pass  # cancelled meanwhile
        self.nominations.record(d, snap.running)
        for p in d.preemptions:
            try:
                lifecycle.request_stop(ctx, p.workload_id, S.PREEMPTED, p.reason)
                report.preempted.append(p.workload_id)
                ctx.metrics.decisions.labels("preempted").inc()
            except Conflict:
                pass  # it ended meanwhile
        todo = [(a.workload_id, a.allocation) for a in d.admissions]
        self._retrying = []
        for i in range(0, len(todo), ADMIT_BATCH):  # short write transactions: API writes
            self._admit_all(todo[i : i + ADMIT_BATCH], now, report)  # interleave
        waiting = [*(waiting or ()), *self._retrying]  # incl. those that just failed to start
        infos: Mapping[str, PendingInfo] = d.pending
        if waiting:
            infos = dict(d.pending.items())  # (the items view: no call per entry)
            infos.update(self._waiting_info(d.pending, considered or [], waiting))
        # compared with what this cycle read; the work admitted now is no longer as read
        if stored is not None:
            for wid in report.admitted:
                stored.pop(wid, None)
        with ctx.store.write() as s:
            WorkloadRepo(s).set_pending_info(infos, stored)
        report.pending = len(infos)

    def _waiting_info(
        self,
        decided: Mapping[str, PendingInfo],
        considered: list[Workload],
        waiting: list[Workload],
    ) -> dict[str, PendingInfo]:
        """Why-pending of work waiting to retry its start: its failure and when it retries,
        placed behind the work of its tenant that the cycle considered."""
        tenant_of = {w.id: w.tenant for w in considered}
        last: dict[str, int] = {}
        rank: dict[str, int] = {}
        for wid, info in decided.items():
            t = tenant_of.get(wid)
            if t is not None:
                last[t] = max(last.get(t, 0), info.position)
                rank[t] = info.tenant_position
        worst = max(rank.values(), default=0)
        policy = self.ctx.settings.start_retry
        out: dict[str, PendingInfo] = {}
        for w in sorted(waiting, key=lambda x: (x.retry_at or 0.0, x.submitted_at, x.id)):
            if w.tenant not in rank:
                worst += 1
                rank[w.tenant] = worst
            last[w.tenant] = last.get(w.tenant, 0) + 1
            why = w.reason if w.reason and w.reason.startswith("could not start") else None
            if why is None:
                why = retry_reason(w.start_attempts, w.retry_at or 0.0, policy.max_attempts)
            out[w.id] = PendingInfo(why, last[w.tenant], rank[w.tenant])
        return out

    def _admit_all(
        self, admissions: list[tuple[str, Allocation]], now: float, report: CycleReport
    ) -> None:
        """Commit the admissions (one transaction: `AdmissionRepo.admit`, each all or nothing),
        start them, then record the launches (one transaction)."""
        ctx = self.ctx
        committed: list[tuple[Workload, Allocation, str | None, dict[str, str]]] = []
        allocs = dict(admissions)
        with ctx.store.write() as s:
            done = AdmissionRepo(s).admit(
                [(alloc, f"admitted {_describe(alloc)}") for _, alloc in admissions], now
            )
            for wid, why in done.refused.items():  # a GPU no longer has room, or raced
                report.raced[wid] = why
                log.info("admission of %s not committed: %s", wid, why)
            owners = UserRepo(s).find_many({w.owner for w in done.workloads})
            envs = WorkloadRepo(s).envs_of([w.id for w in done.workloads])
            for w in done.workloads:
                owner = owners.get(w.owner)
                unix_user = owner.unix_user if owner else None
                committed.append((w, allocs[w.id], unix_user, envs[w.id]))
        launched: list[tuple[str, Handle, ExecStatus | None]] = []
        for w, alloc, unix_user, env in committed:
            report.admitted.append(w.id)
            ctx.metrics.decisions.labels("admitted").inc()
            ctx.metrics.wait_seconds.labels(w.tenant, str(w.kind)).observe(
                max(0.0, now - w.submitted_at)
            )
            handle = self._start(w, alloc, unix_user, env, report)
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
        batch: list[Launch] = []  # the usual launches, written in one go
        others: list[tuple[str, Handle, ExecStatus]] = []  # ended or rejected at once
        for wid, handle, status in launched:
            steps = lifecycle.launch_steps(handle.executor, status)
            if steps is None:
                assert status is not None
                others.append((wid, handle, status))
            else:
                endpoint = status.endpoint if status is not None else None
                batch.append(Launch(wid, handle.ref, steps, endpoint))
        with ctx.store.write() as s:
            launches = LaunchRepo(s)
            at = ctx.clock.now()
            if others:
                # every row locked in id order first, as the admissions' batch locks them
                # (PostgreSQL; another order could deadlock with a second scheduler's batch)
                launches.lock([wid for wid, _, _ in launched])
            took = launches.launch(batch, at)
            started, cancelled = took.started, took.cancelled
            repo = WorkloadRepo(s)
            for wid, handle, status in sorted(others, key=_first):  # (rows locked above)
                state = repo.get(wid).state
                if state is S.ADMITTED:
                    repo.set_executor_ref(wid, handle.ref)
                    why = f"started by the {handle.executor} executor"
                    repo.change_state(wid, S.STARTING, at, why)
                    lifecycle.apply_status(s, repo.record(wid), status, at)
                elif state in ALREADY_STARTED:
                    # the reconciler saw it start first (a watch woke it): keep it
                    repo.set_executor_ref(wid, handle.ref)
                else:  # cancelled while it was being started
                    cancelled.append(wid)
                    continue
                started.append(wid)
        report.started.extend(sorted(started))
        for wid in cancelled:  # stop what was launched for nothing
            ctx.executor.stop(wid, "cancelled while starting", 0.0)

    def _start(
        self,
        w: Workload,
        alloc: Allocation,
        unix_user: str | None,
        env: dict[str, str],
        report: CycleReport,
    ) -> Handle | None:
        """Launch one admitted workload with the environment it declared; on failure roll
        its admission back (see the module docstring for what becomes of it)."""
        ctx = self.ctx
        try:
            refused = notebooks.one_account_refusal(ctx, w)  # queued before the rule applied
            if refused is not None:
                raise StartError(refused, permanent=True)
            return ctx.executor.start(
                w, alloc if alloc.shares else None, env=env or None, unix_user=unix_user
            )
        except ExecutorError as e:
            error, permanent, crash = str(e), isinstance(e, StartError) and e.permanent, None
        except Exception as e:  # noqa: BLE001 - an executor bug must not leak the allocation
            error, permanent, crash = f"{type(e).__name__}: {e}", False, e
        report.start_failed[w.id] = error
        ctx.metrics.decisions.labels("start_failed").inc()
        self._start_failed(w, error, permanent, crash, report)
        return None

    def _start_failed(
        self,
        w: Workload,
        error: str,
        permanent: bool,
        crash: Exception | None,
        report: CycleReport,
    ) -> None:
        """Roll back the admission of `w`: fail it, or requeue it to retry later. A stop asked
        meanwhile (cancel, preemption) wins. One log line (a traceback only for the first
        crash of an executor in a row)."""
        ctx = self.ctx
        now = ctx.clock.now()
        with ctx.store.write() as s:
            repo = WorkloadRepo(s)
            rec = repo.record(w.id, lock=True)  # a cancel may be writing its stop
            if rec.workload.state is not S.ADMITTED:
                return  # settled meanwhile (cancelled while it was being started)
            if rec.stopping is not None:  # nothing runs: it becomes what the stop asked for
                lifecycle.apply_status(s, rec, ExecStatus.unknown(w.id), now)
                return
            out = ctx.settings.start_retry.after_failure(
                rec.workload.start_attempts, error, permanent=permanent, now=now
            )
            data: dict[str, object] = {
                "start_failed": True,
                "attempts": out.attempts,
                "permanent": permanent,
            }
            if out.gives_up:
                repo.change_state(w.id, S.FAILED, now, out.reason, data=data)
                report.start_gave_up[w.id] = out.reason
            else:
                data["retry_at"] = out.retry_at
                repo.change_state(w.id, S.PENDING, now, out.reason, data=data)
            repo.set_start_retry(w.id, out.attempts, out.retry_at)
            if not out.gives_up:
                self._retrying.append(repo.get(w.id))
        if crash is not None and out.attempts == 1:
            log.error("workload %s: %s", w.id, out.reason, exc_info=crash)
        else:
            log.warning("workload %s: %s", w.id, out.reason)
