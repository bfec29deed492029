"""The forecast loop: a start-time forecast for every pending workload (gpupool.sim.forecast),
stored beside its why-pending (`workloads.pending_forecast`) for the API, the CLI, the
dashboard and the hub to show.

It runs on its own, never inside a scheduler cycle: every `interval_s` (30 s), or less often
when a pass is costly: after a pass of `c` seconds the next waits at least `c / share`,
where `share` is `of_scheduler` (10%) of the share of a core the scheduler loop takes (its
last cycle's time over its interval), but never less than `min_share` (0.25% of a core).
So forecasting costs at most a tenth of what scheduling costs, unless that is tiny (a small
cluster: a 50 ms pass may still run every 30 s). At 1,000 nodes with 10,000 pending that
is a pass every 20-30 min (bench/results/forecast/); work submitted meanwhile shows no
forecast until the next pass. Each pass reads the same snapshot the
scheduler reads, learns run times from the last `history_runs` finished runs (re-read every
`history_every_s`), runs the bounded forward replay (`limits`) and writes the forecasts
that changed. A restart loses nothing: forecasts are stored, and the next pass renews them.
`tenant_holds` and `capacity_holds` (callables, e.g. budgets on hold and advance
reservations) are passed to the forward run when given.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain import Workload
from gpupool.scheduler import Snapshot
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.server.loops.scheduler import SchedulerLoop, read_snapshot
from gpupool.sim.forecast import CapacityHold, Forecast, ForecastLimits, forecast
from gpupool.sim.runtimes import RuntimeEstimator
from gpupool.store import WorkloadRepo

log = logging.getLogger(__name__)


@dataclass
class ForecastReport:
    """What one pass did (tests, logs, the bench)."""

    pending: int = 0
    written: int = 0
    seconds: float = 0.0
    next_in_s: float = 0.0


class ForecastLoop(Loop):
    name = "forecast"

    def __init__(
        self,
        ctx: AppContext,
        *,
        interval_s: float = 30.0,
        of_scheduler: float = 0.1,
        min_share: float = 0.0025,
        limits: ForecastLimits = ForecastLimits(),
        history_runs: int = 5000,
        history_every_s: float = 300.0,
        tenant_holds: Callable[[float], Mapping[str, float]] | None = None,
        capacity_holds: Callable[[float], Sequence[CapacityHold]] | None = None,
    ):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.base_interval_s = interval_s
        self.of_scheduler = of_scheduler
        self.min_share = min_share
        self.limits = limits
        self.history_runs = history_runs
        self.history_every_s = history_every_s
        self.tenant_holds = tenant_holds
        self.capacity_holds = capacity_holds
        self._estimator: RuntimeEstimator | None = None
        self._learned_at = float("-inf")
        self.last: ForecastReport | None = None

    def estimator(self, now: float) -> RuntimeEstimator:
        """Run-time estimates from the stored history, re-read every `history_every_s`."""
        if self._estimator is None or now - self._learned_at >= self.history_every_s:
            with self.ctx.store.read() as s:
                runs = WorkloadRepo(s).past_runs(self.history_runs)
            self._estimator = RuntimeEstimator(runs)
            self._learned_at = now
        return self._estimator

    def snapshot(self) -> tuple[Snapshot, list[Workload]]:
        """The scheduler's view (`read_snapshot`): nodes that run work, tenants, active and
        pending work, and the scheduler loop's service scale (relative service levels)."""
        snap, pending = read_snapshot(self.ctx)
        loop = self.ctx.loops.get("scheduler")
        if isinstance(loop, SchedulerLoop) and loop.level_scale.scale:
            snap = dataclasses.replace(snap, service_scale=loop.level_scale.scale)
        return snap, pending

    def _expected_waits(self, pending: list, found: Mapping[str, Forecast], now: float) -> None:
        """/metrics: each tenant's median expected wait (gpupool_tenant_expected_wait_seconds)."""
        waits: dict[str, list[float]] = {}
        for w in pending:
            f = found.get(w.id)
            if f is not None:
                at = f.expected if f.expected is not None else f.until
                waits.setdefault(w.tenant, []).append(max(0.0, at - now))
        gauge = self.ctx.metrics.expected_wait
        gauge.clear()
        for tenant, xs in waits.items():
            gauge.labels(tenant).set(statistics.median(xs))

    def share(self) -> float:
        """The share of a core forecasting may take (see the module docstring)."""
        loop = self.ctx.loops.get("scheduler")
        last = loop.last if isinstance(loop, SchedulerLoop) else None
        cycle_s = last.seconds if last is not None else 0.0
        scheduler = cycle_s / max(1e-3, self.ctx.settings.scheduler_interval_s)
        return max(self.min_share, self.of_scheduler * scheduler)

    def run_once(self) -> ForecastReport:
        t0 = time.perf_counter()
        now = self.ctx.clock.now()
        report = ForecastReport()
        snap, pending = self.snapshot()
        report.pending = len(pending)
        if pending:
            found = forecast(
                snap,
                pending,
                now,
                self.ctx.settings.scheduler,
                self.estimator(now),
                limits=self.limits,
                tenant_holds=self.tenant_holds(now) if self.tenant_holds else None,
                capacity_holds=self.capacity_holds(now) if self.capacity_holds else (),
            )
            with self.ctx.store.write() as s:
                report.written = WorkloadRepo(s).set_forecasts(found)
        self._expected_waits(pending, found if pending else {}, now)
        report.seconds = time.perf_counter() - t0
        self.ctx.metrics.forecast_seconds.observe(report.seconds)
        self.interval_s = max(self.base_interval_s, report.seconds / self.share())
        report.next_in_s = self.interval_s
        self.last = report
        if report.seconds > 1.0:
            log.info(
                "forecast: %d pending, %d changed, %.1f s; next in %.0f s",
                report.pending,
                report.written,
                report.seconds,
                report.next_in_s,
            )
        return report
