"""Discrete-event replay of a Scenario through the scheduler, on a virtual clock.

Events are submissions and completions. A scheduler cycle runs at every instant where
something changed (no two cycles closer than `min_cycle_gap_s`), right again after a cycle
that preempted work or hit its admission cap, and — while work waits — on the
`cycle_interval_s` grid when time alone can change the outcome: a running workload passing
`min_runtime_s`, or waiting work passing `reclaim_after_s`, while some tenant with waiting
work is below its guarantee (a reclaim may now happen). Nothing else changes with time, so
the engine never spins.

Decisions are applied through `gpupool.domain.transition()`:
- admission: pending -> admitted -> starting -> running at once; it completes (`succeeded`)
  `duration` seconds later;
- preemption: running -> preempted, its shares freed at once; with requeue it goes back to
  pending keeping its submit time and **loses its progress** (it restarts from the beginning,
  as Philly jobs without checkpoints do);
- unschedulable: pending -> failed, with the scheduler's reason.
Every admission is checked against the free capacity; an over-allocation raises
SimulationError (that would be a scheduler bug). What the replay gives (`SimResult`, a
`WorkloadRecord` per workload, a `TenantTimeline` per tenant) is in gpupool.sim.result.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Workload, WorkloadState, transition
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.followup import Nominations, requeued
from gpupool.scheduler.levels import ladder
from gpupool.scheduler.timed import cycle_timed
from gpupool.scheduler.timerules import TimeRules
from gpupool.scheduler.types import (
    Decisions,
    PendingInfo,
    Policy,
    RunningWorkload,
    SchedulerConfig,
    Snapshot,
)
from gpupool.sim.budgets import BudgetMeter
from gpupool.sim.fairshare import FairShares
from gpupool.sim.owed import PendingSizes
from gpupool.sim.relative import RelativeLevels
from gpupool.sim.result import SimResult, TenantTimeline, WorkloadRecord
from gpupool.sim.scenario import Scenario
from gpupool.sim.wakeups import Wakeups
from gpupool.sim.window import PendingWindow

S = WorkloadState
CycleFn = Callable[[Snapshot, Sequence[Workload], float, SchedulerConfig], Decisions]
ProgressFn = Callable[[int, int], None]

_SUBMIT, _COMPLETE = 1, 0  # completions first at equal times: their capacity is visible
#: follow-up cycles at one instant run at once; this many in a row without time moving means
#: the scheduler does not converge (a bug), and the replay stops with SimulationError
_MAX_SAME_INSTANT_CYCLES = 100_000


class SimulationError(Exception):
    """The scheduler made a decision the simulator cannot apply (e.g. over-allocation)."""


class Simulator(Wakeups):
    """Replays `scenario` with `cycle_fn` (default: `gpupool.scheduler.cycle`)."""

    def __init__(
        self,
        scenario: Scenario,
        cycle_fn: CycleFn | None = None,
        *,
        sample_every_s: float | None = None,
        progress: ProgressFn | None = None,
    ):
        #: the scheduler's state between cycles (default `cycle_fn` only)
        self.cache: SchedulerCache | None = None
        if cycle_fn is None:
            cache = self.cache = SchedulerCache()
            booked = scenario.reservations  # issue 35: reservations and budgets

            def cycle_fn(
                snap: Snapshot, pending: Sequence[Workload], now: float, config: SchedulerConfig
            ) -> Decisions:
                spent = self.budgets.states() if self.budgets is not None else ()
                rules = TimeRules(spent, booked)
                return cycle_timed(snap, pending, now, config, cache, rules)

        self.s = scenario
        #: GPU-hours used per budget this period (None: the scenario has no budgets)
        self.budgets = (
            BudgetMeter(scenario.budgets, scenario.nodes, 0.0) if scenario.budgets else None
        )
        self.cycle_fn = cycle_fn
        self.clock = ManualClock(0.0)
        self.sample_every_s = sample_every_s
        self.progress = progress
        tree = scenario.tenants
        self.leaves = tree.leaves()
        self.ancestors = {t: tree.ancestors(t) for t in self.leaves}
        self.guarantee = {t.name: t.quota.guaranteed_milli for t in tree}
        self.records: dict[str, WorkloadRecord] = {}
        self.pending: dict[str, Workload] = {}
        self.running: dict[str, RunningWorkload] = {}
        self.alloc = dict.fromkeys(self.leaves, 0)  # milli held per leaf tenant
        self.pending_milli = dict.fromkeys(self.leaves, 0)
        self.pending_count = dict.fromkeys(self.leaves, 0)
        self.pending_sizes = {t: PendingSizes() for t in self.leaves}
        self.fair: dict[str, float] = dict.fromkeys(self.leaves, 0.0)
        self.fair_shares = FairShares(tree)
        self.integrals = {t: TenantTimeline() for t in self.leaves}
        self.attained: dict[str, float] = {t.name: 0.0 for t in tree}
        #: workload id -> milli-GPU-seconds it attained in earlier attempts and keeps
        #: (checkpointing work; Snapshot.attained_service under the workload id)
        self.workload_service: dict[str, float] = {}
        self.capacity = scenario.capacity_milli
        self.preempting = scenario.config.preemption and scenario.config.policy != Policy.FIFO
        #: service levels inside a tenant (fair): checkpointing work may be preempted for
        #: its own tenant's work at a lower level (gpupool.scheduler.levels)
        self.levels = (
            scenario.config.service_levels_s
            if self.preempting and scenario.config.policy == Policy.FAIR
            else ()
        )
        #: relative service levels: the window of started runs and the scale (levels.ladder)
        self.relative = (
            RelativeLevels(scenario.config)
            if self.levels and scenario.config.service_levels_relative
            else None
        )
        #: tenant -> running checkpointing workloads (possible level victims), with levels
        self.ckpt_running: dict[str, int] = {}
        #: (time a running checkpointing workload passes min_runtime_s or a level, id, epoch)
        self.level_heap: list[tuple[float, str, int]] = []
        self.gpu_used: dict[tuple[str, int], list[int]] = {}  # (node, gpu) -> [milli, mib]
        self.gpu_cap = {
            (n.name, g.index): (1000, g.memory_mib) for n in scenario.nodes for g in n.gpus
        }
        self.node_used: dict[str, list[int]] = {n.name: [0, 0] for n in scenario.nodes}
        self.node_cap = {n.name: (n.cpu_milli, n.memory_mib) for n in scenario.nodes}
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.min_runtime_heap: list[tuple[float, str, int]] = []
        #: (time pending work may start to reclaim (`reclaim_after_s`), workload id)
        self.reclaim_due_heap: list[tuple[float, str]] = []
        #: pending workload id -> nodes where work was preempted for it (Snapshot.nominated),
        #: kept as the server keeps them (gpupool.scheduler.followup)
        self.nominations = Nominations()
        self.seq = 0
        self.last_t = 0.0
        self.cycle_ms: list[float] = []
        self.preemptions = 0
        self.events = 0
        self.samples: list[tuple[float, dict[str, int], dict[str, float], int]] = []
        self.next_sample = 0.0
        self.last_pending_info: Mapping[str, PendingInfo] = {}
        self.last_demand: dict[str, int] = {}
        #: alloc or pending_milli changed since the last `_update_fair`
        self.demand_changed = True
        #: pass at most this many pending workloads per tenant and request shape to each
        #: cycle, in the scheduler's in-tenant order (None: all; gpupool.sim.window)
        self.window = (
            None
            if scenario.pending_window is None
            else PendingWindow(
                scenario.pending_window,
                scenario.config.service_levels_s if self.s.config.policy == Policy.FAIR else (),
            )
        )

    # ------------------------------------------------------------------ bookkeeping

    @property
    def nominated(self) -> dict[str, tuple[str, ...]]:
        """The nominations kept now (workload id -> nodes; the dict itself)."""
        return self.nominations.nodes

    def _push(self, t: float, kind: int, wid: str, epoch: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, wid, epoch))

    def _advance(self, t: float) -> None:
        """Integrate per-tenant quantities from the last instant to `t`."""
        dt = t - self.last_t
        if dt > 0:
            if self.sample_every_s:
                while self.next_sample < t:
                    self._sample(self.next_sample)
                    self.next_sample += self.sample_every_s
            for ten in self.leaves:
                a = self.alloc[ten]
                tl = self.integrals[ten]
                demand = a + self.pending_milli[ten]
                tl.allocated += a * dt
                tl.fair += self.fair[ten] * dt
                owed = min(self.guarantee[ten], demand)
                if owed:
                    tl.owed += owed * dt
                    tl.owed_met += min(a, owed) * dt
                    g = self.guarantee[ten]
                    fit = g if a >= g else a + self.pending_sizes[ten].fill(g - a)
                    if fit:
                        tl.owed_fit += fit * dt
                        tl.owed_fit_met += min(a, fit) * dt
                if a:
                    for anc in self.ancestors[ten]:
                        self.attained[anc] += a * dt
        if self.budgets is not None:
            self.budgets.advance(t)
        self.last_t = t
        self.clock.set(t)

    def _sample(self, t: float) -> None:
        self.samples.append(
            (t, dict(self.alloc), dict(self.fair), sum(self.pending_count.values()))
        )

    def _add_pending(self, w: Workload) -> None:
        self.pending[w.id] = w
        self.pending_milli[w.tenant] += w.request.total_gpu_milli
        self.pending_sizes[w.tenant].add(w.request.total_gpu_milli)
        self.demand_changed = True
        self.pending_count[w.tenant] += 1
        if self.window is not None:
            self.window.add(w, self.workload_service)
        if self.preempting and self.s.config.reclaim_after_s > 0:
            due = w.submitted_at + self.s.config.reclaim_after_s
            if due > self.last_t:
                heapq.heappush(self.reclaim_due_heap, (due, w.id))

    def _remove_pending(self, wid: str) -> Workload:
        w = self.pending.pop(wid)
        self.pending_milli[w.tenant] -= w.request.total_gpu_milli
        self.pending_sizes[w.tenant].remove(w.request.total_gpu_milli)
        self.demand_changed = True
        self.pending_count[w.tenant] -= 1
        if self.window is not None:
            self.window.remove(w)
        return w

    def _hidden(self) -> set[str]:
        """Tenants with work beyond the pending window (work the cycle cannot see)."""
        return set() if self.window is None else self.window.hidden()

    def _pending_for_cycle(self) -> tuple[Workload, ...]:
        """All pending work, or with a window only what the window shows."""
        if self.window is None:
            return tuple(self.pending.values())
        return tuple(self.window.visible(self.pending))

    def _take(self, alloc: Allocation, sign: int) -> None:
        """Take (1) or give back (-1) what `alloc` holds, on each of its nodes (a multi-node
        allocation takes its CPUs and memory on every node); raise on over-allocation."""
        for name in alloc.nodes:
            used = self.node_used.get(name)
            if used is None:
                raise SimulationError(f"allocation of {alloc.workload_id} on unknown node {name}")
            used[0] += sign * alloc.cpu_milli
            used[1] += sign * alloc.memory_mib
            if sign > 0 and (used[0] > self.node_cap[name][0] or used[1] > self.node_cap[name][1]):
                raise SimulationError(
                    f"node {name} over-allocated in CPUs or memory by {alloc.workload_id}"
                )
        for sh in alloc.shares:
            key = (sh.node, sh.gpu_index)
            if key not in self.gpu_cap:
                raise SimulationError(f"{alloc.workload_id}: no GPU {key}")
            u = self.gpu_used.setdefault(key, [0, 0])
            u[0] += sign * sh.milli
            u[1] += sign * sh.memory_mib
            cap = self.gpu_cap[key]
            if sign > 0 and (u[0] > cap[0] or u[1] > cap[1]):
                raise SimulationError(
                    f"GPU {key[1]} of node {key[0]} over-allocated by {alloc.workload_id}: "
                    f"{u[0]} milli / {u[1]} MiB used of {cap[0]} / {cap[1]}"
                )

    # ------------------------------------------------------------------ decisions

    def _admit(self, wid: str, alloc: Allocation, t: float) -> None:
        if wid not in self.pending:
            raise SimulationError(f"the scheduler admitted {wid}, which is not pending")
        w = self._remove_pending(wid)
        w, _ = transition(w, S.ADMITTED, t, "admitted by the scheduler")
        w, _ = transition(w, S.STARTING, t, "starting")
        w, _ = transition(w, S.RUNNING, t, "running")
        rec = self.records[wid]
        rec.workload = w
        if rec.first_start is None:
            rec.first_start = t
            if self.relative is not None and alloc.gpu_milli:  # (CPU-only work: no run)
                self.relative.start(wid)
        self._start(rec, RunningWorkload(w, alloc), t)
        if self.preempting and w.preemptible:
            heapq.heappush(self.min_runtime_heap, (t + self.s.config.min_runtime_s, wid, rec.epoch))
        if self.levels and w.checkpointing and w.preemptible:
            heapq.heappush(self.level_heap, (t + self.s.config.min_runtime_s, wid, rec.epoch))
            self._level_wakeups(rec, alloc.gpu_milli, t, t)

    def _level_wakeups(self, rec: WorkloadRecord, milli: int, start: float, t: float) -> None:
        """Wake a cycle when work running since `start` passes each level after `t`."""
        for th in self.levels:
            at = start + (th * 1000.0 - rec.service) / milli if milli else math.inf
            if t < at < math.inf:
                heapq.heappush(self.level_heap, (at, rec.workload.id, rec.epoch))

    def _relevel(self, t: float) -> None:
        """Relative service levels: estimate the scale again (when due); when it moved,
        re-key the pending window and wake cycles at the new levels."""
        rel = self.relative
        if rel is None or not rel.update(self.records, self.running, t):
            return
        self.levels = ladder(self.s.config, rel.scale.scale)
        if self.window is not None:
            window = PendingWindow(self.window.size, self.levels)
            for w in self.pending.values():
                window.add(w, self.workload_service)
            self.window = window
        for wid, rw in self.running.items():
            w, rec = rw.workload, self.records[wid]
            if w.checkpointing and w.preemptible and rec.last_start is not None:
                self._level_wakeups(rec, rw.allocation.gpu_milli, rec.last_start, t)

    def seed_running(self, rw: RunningWorkload, at: float, remaining: float) -> None:
        """Put work that runs at `at` in place, ending `remaining` seconds later: a replay
        that starts from a live state (gpupool.sim.forecast). Kept as `_admit` keeps work it
        starts, but without min-runtime or level wakeups (it started before the replay)."""
        w = dataclasses.replace(rw.workload, state=S.RUNNING)
        rec = self.records[w.id] = WorkloadRecord(w, remaining, first_start=at)
        self._start(rec, RunningWorkload(w, rw.allocation, rw.stopping), at)

    def _start(self, rec: WorkloadRecord, rw: RunningWorkload, t: float) -> None:
        """`rw` runs from `t`: what it holds taken, its end queued (`_release` undoes it)."""
        wid, w, alloc = rec.workload.id, rw.workload, rw.allocation
        self._take(alloc, +1)
        rec.allocation = alloc
        rec.last_start = t
        self.running[wid] = rw
        if self.budgets is not None:
            self.budgets.take(w, alloc, +1)
        if w.tenant in self.alloc:  # seeded work may be of a tenant that is not a leaf
            self.alloc[w.tenant] += alloc.gpu_milli
        self.demand_changed = True
        if self.levels and w.checkpointing and w.preemptible:
            self.ckpt_running[w.tenant] = self.ckpt_running.get(w.tenant, 0) + 1
        self._push(t + rec.duration - rec.progress, _COMPLETE, wid, rec.epoch)

    def _release(self, wid: str, t: float) -> WorkloadRecord:
        rw = self.running.pop(wid)
        rec = self.records[wid]
        w = rw.workload
        if self.levels and w.checkpointing and w.preemptible:
            self.ckpt_running[w.tenant] -= 1
        self._take(rw.allocation, -1)
        if self.budgets is not None:
            self.budgets.take(w, rw.allocation, -1)
        if w.tenant in self.alloc:
            self.alloc[w.tenant] -= rw.allocation.gpu_milli
        self.demand_changed = True
        rec.run_time += t - (rec.last_start if rec.last_start is not None else t)
        rec.epoch += 1
        return rec

    def _preempt(self, wid: str, reason: str, t: float) -> None:
        if wid not in self.running:
            raise SimulationError(f"the scheduler preempted {wid}, which is not running")
        start = self.records[wid].last_start
        milli = self.running[wid].allocation.gpu_milli
        rec = self._release(wid, t)
        w, _ = transition(rec.workload, S.PREEMPTED, t, reason)
        self.preemptions += 1
        if w.checkpointing:  # keeps its progress but what saving and loading costs
            ran = t - (start if start is not None else t)
            rec.progress = min(
                rec.duration, rec.progress + max(0.0, ran - self.s.checkpoint_loss_s)
            )
            rec.service += ran * milli
            self.workload_service[wid] = rec.service
        back = requeued(w, t)
        if back is not None:
            w = back
            self._add_pending(w)
        rec.workload = w

    def _complete(self, wid: str, t: float) -> None:
        self.workload_service.pop(wid, None)
        if self.relative is not None:
            rec, rw = self.records[wid], self.running[wid]
            ran = t - (rec.last_start if rec.last_start is not None else t)
            self.relative.finish(wid, (rec.service + ran * rw.allocation.gpu_milli) / 1000.0)
        rec = self._release(wid, t)
        rec.workload, _ = transition(rec.workload, S.SUCCEEDED, t, "finished", exit_code=0)

    def _fail(self, wid: str, reason: str, t: float) -> None:
        w = self._remove_pending(wid)
        rec = self.records[wid]
        rec.workload, _ = transition(w, S.FAILED, t, reason)
        rec.reason = reason

    # ------------------------------------------------------------------ cycle

    def _run_cycle(self, t: float) -> Decisions:
        self._relevel(t)
        snap = Snapshot(
            nodes=self.s.nodes,
            tenants=self.s.tenants,
            running=tuple(self.running.values()),
            attained_service={**self.attained, **self.workload_service}
            if self.workload_service
            else dict(self.attained),
            nominated=self.nominations.for_snapshot(),
            service_scale=self.relative.scale.scale if self.relative is not None else 0.0,
        )
        pending = self._pending_for_cycle()
        t0 = time.perf_counter()
        d = self.cycle_fn(snap, pending, t, self.s.config)
        self.cycle_ms.append((time.perf_counter() - t0) * 1000.0)
        running = self.running
        victims = (running[p.workload_id] for p in d.preemptions if p.workload_id in running)
        self.nominations.record(d, victims)
        for p in d.preemptions:
            self._preempt(p.workload_id, p.reason, t)
        for a in d.admissions:
            self._admit(a.workload_id, a.allocation, t)
        for wid, reason in d.unschedulable.items():
            if wid in self.pending:
                self._fail(wid, reason, t)
        self.last_pending_info = d.pending  # reasons are copied once, at the end
        return d

    def _update_fair(self) -> None:
        """Recompute the reference fair shares when demand changed (after events/cycles)."""
        if not self.demand_changed:
            return
        self.demand_changed = False
        demand = {ten: self.alloc[ten] + self.pending_milli[ten] for ten in self.leaves}
        if demand != self.last_demand:
            self.last_demand = demand
            self.fair = self.fair_shares(demand, self.capacity)

    def run(self) -> SimResult:
        """Replay to the end. The cyclic garbage collector is paused meanwhile: the replay
        makes millions of short-lived acyclic objects, and its scans would dominate."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> SimResult:
        wall0 = time.perf_counter()
        for sw in self.s.workloads:
            self.records[sw.workload.id] = WorkloadRecord(sw.workload, sw.duration)
            self._push(sw.workload.submitted_at, _SUBMIT, sw.workload.id)
        for wid, reason in self.s.unschedulable.items():
            rec = self.records[wid]
            rec.workload, _ = transition(rec.workload, S.FAILED, rec.workload.submitted_at, reason)
            rec.reason = reason
        last_submit = max((sw.workload.submitted_at for sw in self.s.workloads), default=None)
        first_submit = min((sw.workload.submitted_at for sw in self.s.workloads), default=None)
        self.last_t = first_submit or 0.0
        self.next_sample = self.last_t
        self.clock.set(self.last_t)
        total = len(self.heap)
        alloc_ratio_at_last_submit: float | None = None
        ratio_open = True  # the ratio is still measured (no completion since the last submit)
        cycle_due: float | None = None
        last_cycle_t = -math.inf
        same_instant = 0
        last_end: float | None = None
        gap = self.s.min_cycle_gap_s
        done = reported = 0
        new_subs: list[Workload] = []  # submitted since the last cycle
        freed = False  # capacity freed since the last cycle
        tick = False  # the due cycle is a follow-up or time-driven one
        while True:
            t_ev = self.heap[0][0] if self.heap else math.inf
            t = min(t_ev, cycle_due if cycle_due is not None else math.inf)
            if t == math.inf:
                break
            self._advance(t)
            while self.heap and self.heap[0][0] <= t:
                _, kind, _, wid, epoch = heapq.heappop(self.heap)
                rec = self.records[wid]
                if kind == _SUBMIT:
                    done += 1
                    if rec.state is S.PENDING:
                        self._add_pending(rec.workload)
                        new_subs.append(rec.workload)
                        due = max(t, last_cycle_t + gap)
                        cycle_due = due if cycle_due is None else min(cycle_due, due)
                elif epoch == rec.epoch and wid in self.running:
                    if alloc_ratio_at_last_submit is not None:
                        ratio_open = False
                    self._complete(wid, t)
                    freed = True
                    last_end = t
                    due = max(t, last_cycle_t + gap)
                    cycle_due = due if cycle_due is None else min(cycle_due, due)
                self.events += 1
            self._update_fair()
            if self.progress and done - reported >= 2048:
                reported = done
                self.progress(done, total)
            if cycle_due is None or t < cycle_due:
                continue
            if not self.pending or (not freed and not tick and self._futile(new_subs)):
                # nothing could change: no work waits, or the cluster is full and nothing was
                # freed and the newcomers cannot reclaim
                cycle_due = None
                new_subs.clear()
                continue
            same_instant = same_instant + 1 if t == last_cycle_t else 0
            if same_instant >= _MAX_SAME_INSTANT_CYCLES:
                raise SimulationError(
                    f"{same_instant} scheduler cycles at t={t:g} without time moving on: "
                    "the scheduler does not converge"
                )
            hidden = self._hidden()
            d = self._run_cycle(t)
            self._update_fair()
            last_cycle_t = t
            cycle_due = None
            new_subs.clear()
            freed = bool(d.preemptions)
            if d.admissions:
                last_end = t if last_end is None else max(last_end, t)
            if ratio_open and last_submit is not None and t >= last_submit:
                # every cycle until the first completion after the last submission
                alloc_ratio_at_last_submit = sum(self.alloc.values()) / max(
                    1, self.s.capacity_milli
                )
            cap_hit = (
                self.s.config.max_admissions_per_cycle is not None
                and len(d.admissions) >= self.s.config.max_admissions_per_cycle
            )
            # admissions moved a window that hid work: the work behind it may start now
            window_moved = bool(hidden) and any(
                self.records[a.workload_id].workload.tenant in hidden for a in d.admissions
            )
            tick = True  # a follow-up or time-driven cycle is never skipped
            if self.pending and (d.preemptions or cap_hit or window_moved):
                cycle_due = t + gap  # a follow-up cycle: at once (or after the gap)
            else:
                cycle_due = self._time_wakeup(t)
                tick = cycle_due is not None
        for wid in self.pending:
            info = self.last_pending_info.get(wid)
            if info is not None:
                self.records[wid].reason = info.reason
        if self.progress:
            self.progress(total, total)
        if self.sample_every_s:
            self._sample(self.last_t)
        return SimResult(
            records=self.records,
            capacity_milli=self.s.capacity_milli,
            tenants=self.leaves,
            guarantees={t: self.guarantee[t] for t in self.leaves},
            integrals=self.integrals,
            first_submit=first_submit,
            last_end=last_end,
            allocation_ratio_at_last_submit=alloc_ratio_at_last_submit,
            cycle_ms=self.cycle_ms,
            preemptions=self.preemptions,
            events=self.events,
            samples=self.samples,
            wall_s=time.perf_counter() - wall0,
        )


def simulate(
    scenario: Scenario,
    cycle_fn: CycleFn | None = None,
    *,
    sample_every_s: float | None = None,
    progress: ProgressFn | None = None,
) -> SimResult:
    """Replay `scenario` and return what happened."""
    return Simulator(scenario, cycle_fn, sample_every_s=sample_every_s, progress=progress).run()
