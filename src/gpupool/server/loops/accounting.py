"""The accounting loop: GPU-seconds allocated and busy, per workload and UTC day.

Each pass adds, for every workload holding GPUs, the time since it was last accounted:
allocated GPU-seconds = GPUs held (milli / 1000) x seconds; busy GPU-seconds = allocated x
the busy fraction telemetry reports for that interval (0 when unknown); GPU memory in
MiB-seconds and the maximum seen. Work that ended since the last pass is accounted up to the
release of its allocation. Intervals that cross midnight UTC are split between the days. Rollups per
user, tenant and day are queries over these rows (`UsageRepo.rollup`).

Engines that know when they really ran the work (a cluster's own start and end of a job,
`ExecutorWithRunTimes.run_times`) are taken at their word: a workload is accounted from that
start (nothing while it waits in the engine's queue) to that end, not from admission to when
gpupool noticed the end, so per-tenant GPU-hours agree with the engine's own accounting.
Time accounted while the work looked alive but had already ended (the engine's end, learnt
later, is earlier) is taken back from the same rows.

Work that started and ended between two passes (shorter than the interval) is accounted
from the allocations released since the previous pass (on the first pass: the last day),
unless its workload already has usage.

Restart safety: on its first pass the loop resumes each running workload from what the store
already holds for it (allocated seconds / GPUs held), so a restart neither counts time twice
nor leaves a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from gpupool.domain import Allocation, Workload
from gpupool.engines.common.executor import Executor, ExecutorWithRunTimes
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store import AllocationRepo, UsageRepo, WorkloadRepo

log = logging.getLogger(__name__)
DAY = 86400.0
_MARGIN_S = 300.0


def split_by_day(t0: float, t1: float) -> list[tuple[str, float]]:
    """[(YYYY-MM-DD, seconds)] covering [t0, t1), split at midnight UTC."""
    out: list[tuple[str, float]] = []
    t = t0
    while t < t1:
        end = min(t1, (t // DAY + 1) * DAY)
        out.append((datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d"), end - t))
        t = end
    return out


RunTimes = Callable[[str], tuple[float | None, float | None] | None]


def _not_told(workload_id: str) -> None:
    return None


def run_times_of(executor: Executor) -> RunTimes:
    """workload id -> the engine's own (start, end) of the work; None where it does not
    tell (an executor without `ExecutorWithRunTimes`: the allocation's times hold)."""
    return executor.run_times if isinstance(executor, ExecutorWithRunTimes) else _not_told


class AccountingLoop(Loop):
    name = "accounting"

    def __init__(
        self,
        ctx: AppContext,
        busy_fraction: Callable[[Allocation, float], float | None] | None = None,
        memory_mib: Callable[[Allocation], float] | None = None,
        *,
        interval_s: float = 60.0,
        estimated_fraction: Callable[[Allocation, float], float] | None = None,
    ):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        #: (allocation, accounted since) -> busy fraction over that window, or None
        self.busy_fraction = busy_fraction or (lambda a, since: None)
        self.memory_mib = memory_mib or (lambda a: 0.0)
        #: (allocation, accounted since) -> the part (0..1) of its busy fraction that is an
        #: estimate (MPS shares, docs/telemetry.md); those seconds count as estimated
        self.estimated_fraction = estimated_fraction or (lambda a, since: 0.0)
        #: workload id -> (workload, allocation, accounted up to)
        self._open: dict[str, tuple[Workload, Allocation, float]] = {}
        self._resumed = False
        self._last_pass: float | None = None
        #: (workload id, allocation since) -> when accounted to its end (not looked at again)
        self._closed: dict[tuple[str, float], float] = {}

    def run_once(self) -> int:
        """One pass; returns how many usage rows were added to."""
        ctx = self.ctx
        now = ctx.clock.now()
        with ctx.store.read() as s:
            running = {
                rw.workload.id: (rw.workload, rw.allocation)
                for rw in AllocationRepo(s).running()
                if rw.allocation.shares
            }
            ended = {
                wid: AllocationRepo(s).last_for(wid) for wid in self._open if wid not in running
            }
            done_before = {}
            if not self._resumed:
                done_before = {
                    u.key: u.gpu_seconds_allocated for u in UsageRepo(s).rollup("workload")
                }
            # started and ended between two passes: never opened (a margin for releases
            # committed after the previous pass read, stamped before it)
            since = now - DAY if self._last_pass is None else self._last_pass - _MARGIN_S
            unseen = [
                (WorkloadRepo(s).get(a.workload_id), a, released)
                for a, released in AllocationRepo(s).released_since(since)
                if a.shares
                and (a.workload_id, a.since) not in self._closed
                and a.workload_id not in self._open
                and a.workload_id not in running
                and a.workload_id not in done_before
            ]
        writes: list[tuple[Workload, Allocation, float, float]] = []
        run_times = run_times_of(ctx.executor)
        for wid, last in ended.items():
            w, a, t0 = self._open.pop(wid)
            self._closed[(wid, a.since)] = now
            end = now
            if last is not None and last[1] is not None:
                end = last[1]
            ran = run_times(wid)
            engine_end = ran is not None and ran[1] is not None
            if engine_end:
                end = ran[1]  # the engine's end, not when gpupool noticed it
            if end > t0 or (engine_end and end < t0):  # accounted past the engine's end:
                writes.append((w, a, t0, end))  # taken back
        for w, a, released in unseen:
            self._closed[(w.id, a.since)] = now
            ran = run_times(w.id)
            begin, end = (a.since, released) if ran is None else ran
            if begin is not None and (end if end is not None else released) > begin:
                writes.append((w, a, begin, end if end is not None else released))
        for wid, (w, a) in running.items():
            ran = run_times(wid)
            begin, end = (a.since, now) if ran is None else ran
            if begin is None:
                continue  # not started in the engine (yet): nothing to account
            end = now if end is None else min(end, now)
            prev = self._open.get(wid)
            if prev is not None and prev[1].since == a.since:
                t0 = prev[2]
            else:
                t0 = begin
                gpus = a.gpu_milli / 1000
                if wid in done_before and gpus > 0:
                    t0 = min(now, begin + done_before[wid] / gpus)
            ended_early = ran is not None and ran[1] is not None and end < t0
            if end > t0 or ended_early:  # ended_early: accounted past the engine's end
                writes.append((w, a, t0, end))
            self._open[wid] = (w, a, end if ended_early else max(t0, end))
        self._resumed = True
        self._last_pass = now
        self._closed = {k: t for k, t in self._closed.items() if now - t <= 2 * _MARGIN_S}
        rows = 0
        if writes:
            with ctx.store.write() as s:
                repo = UsageRepo(s)
                for w, a, t0, t1 in writes:
                    sign = 1.0 if t1 >= t0 else -1.0
                    t0, t1 = min(t0, t1), max(t0, t1)
                    frac = self.busy_fraction(a, t0)
                    est = 0.0 if frac is None else self.estimated_fraction(a, t0)
                    mem = self.memory_mib(a) if sign > 0 else 0.0
                    gpus = a.gpu_milli / 1000 * sign
                    for day, secs in split_by_day(t0, t1):
                        repo.add(
                            workload_id=w.id,
                            tenant=w.tenant,
                            user=w.owner,
                            day=day,
                            gpu_seconds_allocated=gpus * secs,
                            gpu_seconds_busy=gpus * secs * (frac or 0.0),
                            gpu_seconds_measured=(
                                0.0 if frac is None else gpus * secs * (1.0 - est)
                            ),
                            gpu_seconds_estimated=0.0 if frac is None else gpus * secs * est,
                            gpu_memory_mib_seconds=mem * secs,
                            gpu_memory_mib=int(mem),
                        )
                        rows += 1
        return rows
