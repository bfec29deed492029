"""Start-time forecasts: run the pure scheduler forward, in the simulator, on a copy of the
live state, and read off when each pending workload starts.

`forecast(snapshot, pending, now, config, estimator)` replays the cluster twice from `now`:
running work ends, and pending work runs, after its *typical* estimated time (p50) in the
first run and its *long* one (p90) in the second (gpupool.sim.runtimes). A workload's
`expected` start is when it started in the first run, its `latest` when it started in the
second ("expected in about 12 min, by 12:40 at the latest in 9 of 10 cases"; how often the
band holds is measured on the Philly trace: docs/scheduler.md, "Forecasts"). No new work
arrives in a forward run, so work submitted later that goes first (a tenant below its
guarantee, a higher priority) makes a start later than forecast.

The work is bounded (`ForecastLimits`): each run stops at `horizon_s` of simulated time or
after `max_cycles` scheduler cycles, cycles are at least `step_s` apart and at least
`resolution` of the time ahead (completions in between are taken together: a start 10 h
ahead is known to within an hour), and with a `window` each cycle sees at most that many
pending workloads per tenant and shape (gpupool.sim.window; off by default: it hides the
work that backfills, and made forecasts far too late on Philly). Work that has not started
when a run stops gets no time from it (`None`: "not within the horizon", `until` says when
that is).

Inputs from other rules: `tenant_holds` (tenant -> time before which none of its pending
work may start, e.g. a budget on hold until the period resets) and `capacity_holds` (GPUs
kept free from one time to another, e.g. an advance reservation: modelled as top-priority,
non-preemptible work of the holding tenant over that window). Work backing off after a
failed start joins at its `retry_at`. Pure: no I/O; times are on the scheduler's clock.
"""

from __future__ import annotations

import contextlib
import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpupool.domain import Allocation, Request, Workload
from gpupool.scheduler.levels import fixed_ladder
from gpupool.scheduler.types import Decisions, SchedulerConfig, Snapshot
from gpupool.sim.engine import _SUBMIT, Simulator
from gpupool.sim.runtimes import RuntimeEstimate, RuntimeEstimator
from gpupool.sim.scenario import Scenario, SimWorkload

#: the owner of the work that stands for a capacity hold in a forward run
HOLD_OWNER = "(hold)"
#: how long work already being stopped is taken to hold its GPUs still (the stop's grace)
STOPPING_S = 30.0


@dataclass(frozen=True, slots=True)
class ForecastLimits:
    """What one forecast may cost (see the module docstring)."""

    horizon_s: float = 24 * 3600.0
    max_cycles: int = 100
    #: cycles at least this far apart (simulated seconds) ...
    step_s: float = 60.0
    #: ... and at least this share of the time ahead apart: the far future is seen coarser
    #: (0.1: around 10 h ahead, one cycle an hour), which bounds a day to ~60 cycles
    resolution: float = 0.1
    #: at most this many pending workloads per tenant and shape in each cycle (None: all;
    #: a window hides backfill candidates, and made forecasts far too late on Philly)
    window: int | None = None


@dataclass(frozen=True, slots=True)
class CapacityHold:
    """`gpus` whole GPUs (of `gpu_model`, any if None) kept for `tenant` from `start` to `end`."""

    tenant: str
    start: float
    end: float
    gpus: int
    gpu_model: str | None = None


@dataclass(frozen=True, slots=True)
class Forecast:
    """When a pending workload is expected to start, and by when at the latest (None: not
    within the forecast's horizon, `until`); `basis` says what that rests on, `runtime_s` and
    `runtime_basis` how long the workload itself is expected to run and from what."""

    expected: float | None
    latest: float | None
    until: float
    basis: str
    runtime_s: float
    runtime_basis: str
    made_at: float


@dataclass(slots=True)
class ForecastRun:
    """One forward run's outcome (for the bench and tests)."""

    starts: dict[str, float]
    until: float
    cycles: int
    #: (time, source) of each end of work that was running or started in the run, by time
    ends: list[tuple[float, str]] = field(default_factory=list)


class _Stop(Exception):
    pass


class _ForwardSim(Simulator):
    """The simulator, started from a live state instead of an empty cluster."""

    def __init__(
        self,
        scenario: Scenario,
        now: float,
        release_at: Mapping[str, float],
        limits: ForecastLimits,
        sources: dict[str, str],
    ):
        super().__init__(scenario)
        self.now = now
        self.release_at = release_at
        self.limits = limits
        self.until = now + limits.horizon_s
        self.cycles = 0
        self.sources = sources
        self.ends: list[tuple[float, str]] = []
        #: capacity holds (as work): when each ends, however late it got its GPUs
        self.hold_ends: dict[str, float] = {}
        #: no cycle before this time (ForecastLimits.resolution); a cycle asked for earlier
        #: is put off until then
        self.next_cycle_at = now
        self._put_off = False

    def _push(self, t: float, kind: int, wid: str, epoch: int = 0) -> None:
        if kind == _SUBMIT:  # pending work joins now (or when its hold lets it)
            t = max(t, self.now, self.release_at.get(wid, self.now))
        super()._push(t, kind, wid, epoch)

    def _admit(self, wid: str, alloc: Allocation, t: float) -> None:
        end = self.hold_ends.get(wid)
        if end is not None:
            self.records[wid].duration = max(1.0, end - t)
        super()._admit(wid, alloc, t)

    def _complete(self, wid: str, t: float) -> None:
        self.ends.append((t, self.sources.get(wid, "default")))
        super()._complete(wid, t)

    def _run_cycle(self, t: float) -> Decisions:
        if t > self.until or self.cycles >= self.limits.max_cycles:
            self.until = min(self.until, t)
            raise _Stop
        if t < self.next_cycle_at:  # too soon after the last one: at next_cycle_at instead
            self._put_off = True
            return Decisions()
        self.cycles += 1
        lim = self.limits
        self.next_cycle_at = t + max(lim.step_s, lim.resolution * (t - self.now))
        return super()._run_cycle(t)

    def _time_wakeup(self, t: float) -> float | None:
        due = super()._time_wakeup(t)
        if self._put_off:
            self._put_off = False
            due = self.next_cycle_at if due is None else min(due, self.next_cycle_at)
        return due


def _holds_as_work(
    holds: Sequence[CapacityHold], snapshot: Snapshot, now: float
) -> list[SimWorkload]:
    """Each hold as top-priority, non-preemptible work of its tenant, one per node's worth."""
    per_node = max((len(n.gpus) for n in snapshot.nodes), default=0)
    out: list[SimWorkload] = []
    for i, h in enumerate(holds):
        if h.end <= now or h.gpus <= 0 or per_node == 0 or h.tenant not in snapshot.tenants:
            continue
        left, j = h.gpus, 0
        while left > 0:
            n = min(left, per_node)
            w = Workload(
                id=f"hold-{i}-{j}",
                tenant=h.tenant,
                owner=HOLD_OWNER,
                request=Request(gpus=n, gpu_model=h.gpu_model),
                priority=1_000_000,
                preemptible=False,
                submitted_at=max(now, h.start),
            )
            out.append(SimWorkload(w, h.end - max(now, h.start)))
            left -= n
            j += 1
    return out


def forward_run(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    now: float,
    config: SchedulerConfig,
    runtime: Callable[[Workload, float], tuple[float, str]],
    *,
    limits: ForecastLimits = ForecastLimits(),
    release_at: Mapping[str, float] | None = None,
    capacity_holds: Sequence[CapacityHold] = (),
) -> ForecastRun:
    """One forward run where each workload runs `runtime(w, elapsed)` = (seconds left, source)."""
    sources: dict[str, str] = {}
    work: list[SimWorkload] = []
    for w in pending:
        seconds, sources[w.id] = runtime(w, 0.0)
        work.append(SimWorkload(w, max(1.0, seconds)))
    work += _holds_as_work(capacity_holds, snapshot, now)
    scen = Scenario(
        nodes=snapshot.nodes,
        tenants=snapshot.tenants,
        workloads=work,
        # relative service levels: the ladder of the snapshot's scale, fixed for the run
        config=fixed_ladder(config, snapshot.service_scale),
        cycle_interval_s=limits.step_s,
        min_cycle_gap_s=limits.step_s,
        pending_window=limits.window,
    )
    sim = _ForwardSim(scen, now, release_at or {}, limits, sources)
    sim.hold_ends = {
        sw.workload.id: sw.workload.submitted_at + sw.duration
        for sw in work
        if sw.workload.owner == HOLD_OWNER
    }
    sim.attained.update({k: v for k, v in snapshot.attained_service.items() if k in sim.attained})
    sim.nominated.update(snapshot.nominated)
    for rw in snapshot.running:
        w = rw.workload
        if rw.stopping:
            seconds, source = STOPPING_S, "stopping"
        else:
            started = w.started_at if w.started_at is not None else now
            seconds, source = runtime(w, max(0.0, now - started))
        sources[w.id] = source
        sim.seed_running(rw, now, max(1.0, seconds))
    with contextlib.suppress(_Stop):  # the horizon or the cycle cap was reached
        sim.run()
    starts = {
        w.id: rec.first_start
        for w in pending
        if (rec := sim.records.get(w.id)) is not None and rec.first_start is not None
    }
    until = sim.until if math.isfinite(sim.until) else now + limits.horizon_s
    return ForecastRun(starts, until, sim.cycles, sorted(sim.ends))


_SOURCE_WORDS = {
    "declared": "from declared max runtimes",
    "user": "learned from the user's past runs",
    "tenant": "learned from the tenant's past runs",
    "default": "default guesses",
    "stopping": "being stopped",
}


class _Bases:
    """'rests on when 9 workloads ahead of it end: 5 learned from ..., 3 from declared max
    runtimes, 1 default guesses', for a start at any time: prefix counts of a run's ends."""

    def __init__(self, ends: list[tuple[float, str]]):
        self.times = [t for t, _ in ends]
        self.prefix: list[dict[str, int]] = [{}]
        for _, source in ends:
            counts = dict(self.prefix[-1])
            counts[source] = counts.get(source, 0) + 1
            self.prefix.append(counts)
        self._memo: dict[int, str] = {}

    def at(self, t: float) -> str:
        k = bisect_right(self.times, t)
        text = self._memo.get(k)
        if text is None:
            text = self._memo[k] = self._text(k)
        return text

    def _text(self, k: int) -> str:
        if k == 0:
            return "it needs no running work to end first"
        counts = sorted(self.prefix[k].items(), key=lambda x: -x[1])
        parts = [f"{n} {_SOURCE_WORDS.get(s, s)}" for s, n in counts]
        work = "workload" if k == 1 else "workloads"
        return f"rests on when {k} {work} ahead of it end: " + ", ".join(parts)


def _hhmm(t: float) -> str:
    return datetime.fromtimestamp(round(t), UTC).strftime("%H:%M UTC")


def forecast_text(f: Forecast) -> str:
    """'expected to start around 12:28 UTC, by 12:40 UTC at the latest (p90)', or what is
    known beyond the horizon; times absolute (a reader adds 'in 12 min' with its own clock)."""
    if f.expected is None:
        return f"not expected to start before {_hhmm(f.until)} (the forecast's horizon)"
    if f.expected <= f.made_at:
        head = "expected to start at the next scheduling pass"
    else:
        head = f"expected to start around {_hhmm(f.expected)}"
    if f.latest is None:
        return head + f"; it may take past {_hhmm(f.until)}"
    if f.latest <= f.expected:
        return head
    return head + f", by {_hhmm(f.latest)} at the latest (p90)"


def forecast(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    now: float,
    config: SchedulerConfig,
    estimator: RuntimeEstimator,
    *,
    limits: ForecastLimits = ForecastLimits(),
    tenant_holds: Mapping[str, float] | None = None,
    capacity_holds: Sequence[CapacityHold] = (),
) -> dict[str, Forecast]:
    """A forecast for each workload of `pending` (see the module docstring)."""
    cache: dict[tuple[str, float], RuntimeEstimate] = {}

    def est(w: Workload, elapsed: float) -> RuntimeEstimate:
        key = (w.id, elapsed)
        e = cache.get(key)
        if e is None:
            e = cache[key] = estimator.estimate(w, elapsed)
        return e

    release: dict[str, float] = {}
    holds = tenant_holds or {}
    for w in pending:
        at = max(holds.get(w.tenant, now), w.retry_at or now)
        if at > now:
            release[w.id] = at

    def run(length: Callable[[RuntimeEstimate], float]) -> ForecastRun:
        return forward_run(
            snapshot,
            pending,
            now,
            config,
            lambda w, e: (length(est(w, e)), est(w, e).source),
            limits=limits,
            release_at=release,
            capacity_holds=capacity_holds,
        )

    typical = run(lambda r: r.typical_s)
    long = run(lambda r: r.long_s)
    until = min(typical.until, long.until)
    bases = _Bases(typical.ends)
    out: dict[str, Forecast] = {}
    for w in pending:
        exp = typical.starts.get(w.id)
        late = long.starts.get(w.id)
        if exp is not None and late is not None and late < exp:
            late = exp  # the long run is not always later for every workload: keep a band
        own = est(w, 0.0)
        out[w.id] = Forecast(
            expected=exp,
            latest=late,
            until=until,
            basis=bases.at(typical.until if exp is None else exp),
            runtime_s=own.typical_s,
            runtime_basis=own.basis,
            made_at=now,
        )
    return out


__all__ = [
    "CapacityHold",
    "Forecast",
    "ForecastLimits",
    "ForecastRun",
    "forecast",
    "forecast_text",
    "forward_run",
]
