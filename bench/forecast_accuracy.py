"""How right start-time forecasts are (issue 35 part 1), on the Philly trace.

Replays a week of the trace (the five largest teams, the cluster sized for `--load`, as
bench/trace_weeks.py does) under each policy. Whenever a job is still waiting after the
scheduler cycle that saw it arrive, every `--every`-th such job (at most `--max` per
policy) gets the forecast the server would give it then: `gpupool.sim.forecast.forecast`
on a copy of the replay's state, with run times learned from the jobs that ended so far
(the trace has no users: each team is its own user, so estimates are per team and shape;
the trace's real durations are never shown to the forecast). At the end each forecast is
compared with when the job really started:

- median absolute error of `expected`, and the median signed error (actual - expected,
  positive: it started later than forecast);
- "held": how often the job started by `latest` (the p90 promise, "by 12:40 at the latest
  in 9 of 10 cases");
- "in band": how often it started between 0.5 x and `latest` of the forecast wait
  (a band around `expected`);
- how many forecasts said "not within the horizon" (and how many of those were right).

    nice python3 bench/forecast_accuracy.py --trace /work/shared/data/philly/philly.csv \
        --start 2017-10-02 --days 7 --policies fair,fifo --json

`--plot PATH` draws, per policy, each forecast wait (`expected`, with a bar up to `latest`)
against the real wait (PNG).

Results: bench/results/forecast/accuracy_*.json and docs/scheduler.md, "Forecasts".
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from dataclasses import dataclass

from gpupool.domain import Workload, WorkloadKind
from gpupool.scheduler.types import Decisions, Policy, Snapshot
from gpupool.sim.engine import Simulator
from gpupool.sim.forecast import Forecast, ForecastLimits, forecast
from gpupool.sim.runtimes import PastRun, RuntimeEstimator
from gpupool.sim.trace import filter_jobs, read_trace, trace_scenario


@dataclass
class Sample:
    submitted: float
    made_at: float
    forecast: Forecast


class ForecastingSim(Simulator):
    """The replay, forecasting the start of sampled jobs that wait after their first cycle."""

    def __init__(
        self,
        scenario,
        *,
        every: int,
        most: int,
        limits: ForecastLimits,
        history: list[PastRun],
    ):
        super().__init__(scenario)
        self.every, self.most, self.limits = every, most, limits
        self.estimator = RuntimeEstimator(history)
        self.new: list[str] = []
        self.seen_waiting = 0
        self.samples: dict[str, Sample] = {}
        self.forecast_cpu = 0.0

    def _add_pending(self, w: Workload) -> None:
        super()._add_pending(w)
        if w.preemptions == 0 and self.records[w.id].first_start is None:
            self.new.append(w.id)

    def _complete(self, wid: str, t: float) -> None:
        rec = self.records[wid]
        w = rec.workload
        super()._complete(wid, t)
        self.estimator.add(
            PastRun(w.owner, w.tenant, w.kind, w.request.total_gpu_milli, rec.duration)
        )

    def _run_cycle(self, t: float) -> Decisions:
        d = super()._run_cycle(t)
        fresh = [wid for wid in self.new if wid in self.pending]
        self.new.clear()
        for wid in fresh:
            self.seen_waiting += 1
            if self.seen_waiting % self.every or len(self.samples) >= self.most:
                continue
            snap = Snapshot(
                self.s.nodes,
                self.s.tenants,
                tuple(self.running.values()),
                {**self.attained, **self.workload_service},
                dict(self.nominated),
            )
            c0 = time.process_time()
            got = forecast(
                snap,
                list(self.pending.values()),
                t,
                self.s.config,
                self.estimator,
                limits=self.limits,
            )
            self.forecast_cpu += time.process_time() - c0
            w = self.pending[wid]
            self.samples[wid] = Sample(w.submitted_at, t, got[wid])
        return d


def score(sim: ForecastingSim) -> dict:
    errors, signed, held, band, beyond, beyond_right = [], [], 0, 0, 0, 0
    reach: list[float] = []  # how far ahead the forward runs got (h) when they said "beyond"
    n = 0
    for wid, s in sim.samples.items():
        actual = sim.records[wid].first_start
        f = s.forecast
        if f.expected is None:
            beyond += 1
            beyond_right += actual is None or actual >= f.until
            reach.append((f.until - s.made_at) / 3600)
            continue
        if actual is None:
            continue  # never started in the replay: nothing to compare
        n += 1
        errors.append(abs(actual - f.expected))
        signed.append(actual - f.expected)
        late = f.latest if f.latest is not None else f.until
        held += actual <= late + 60  # forecasts are on a minute grid
        wait = f.expected - s.made_at
        band += s.made_at + 0.5 * wait - 60 <= actual <= late + 60
    waits = [
        (sim.records[w].first_start or 0) - s.submitted
        for w, s in sim.samples.items()
        if sim.records[w].first_start is not None
    ]
    return {
        "forecasts": len(sim.samples),
        "compared": n,
        "median_actual_wait_h": round(statistics.median(waits) / 3600, 2) if waits else None,
        "median_abs_error_h": round(statistics.median(errors) / 3600, 2) if errors else None,
        "median_signed_error_h": round(statistics.median(signed) / 3600, 2) if signed else None,
        "held_by_latest": round(held / n, 3) if n else None,
        "in_band": round(band / n, 3) if n else None,
        "beyond_horizon": beyond,
        "beyond_horizon_right": beyond_right,
        "beyond_horizon_median_reach_h": round(statistics.median(reach), 1) if reach else None,
        "forecast_cpu_s_mean": round(sim.forecast_cpu / max(1, len(sim.samples)), 2),
    }


def points(sim: ForecastingSim) -> list[tuple[float, float | None, float | None]]:
    """(real wait, forecast wait, latest wait) in hours of each forecast whose job started."""
    out = []
    for wid, s in sim.samples.items():
        actual = sim.records[wid].first_start
        if actual is None:
            continue
        f = s.forecast

        def h(t: float | None, made: float = s.made_at) -> float | None:
            return None if t is None else (t - made) / 3600

        out.append(((actual - s.made_at) / 3600, h(f.expected), h(f.latest)))
    return out


def plot(path: str, by_policy: dict[str, list[tuple[float, float | None, float | None]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_policy), figsize=(6 * len(by_policy), 5), squeeze=False)
    for ax, (pol, pts) in zip(axes[0], by_policy.items(), strict=True):
        known = [p for p in pts if p[1] is not None]
        xs = [p[0] for p in known]
        ys = [p[1] for p in known]
        tops = [(p[2] if p[2] is not None else 24.0) - p[1] for p in known]  # type: ignore[operator]
        ax.errorbar(xs, ys, yerr=[[0] * len(ys), tops], fmt="o", ms=3, alpha=0.6, lw=0.8)
        beyond = [p[0] for p in pts if p[1] is None]
        ax.plot(beyond, [24.0] * len(beyond), "x", color="red", label="not within 24 h")
        top = max([24.0, *xs, *ys])
        ax.plot([0, top], [0, top], color="grey", lw=0.8, label="forecast = real")
        ax.set_title(f"{pol}: forecast at submission vs real wait")
        ax.set_xlabel("real wait (h)")
        ax.set_ylabel("forecast wait (h): expected, bar to latest")
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="/work/shared/data/philly/philly.csv")
    ap.add_argument("--start", default="2017-10-02")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--load", type=float, default=1.2)
    ap.add_argument("--policies", default="fair,fifo")
    ap.add_argument("--every", type=int, default=10, help="forecast every Nth waiting job")
    ap.add_argument("--max", type=int, default=150, help="forecasts per policy at most")
    ap.add_argument("--history-days", type=int, default=14, help="runs learned before")
    ap.add_argument("--window", type=int, default=ForecastLimits().window, help="0: none")
    ap.add_argument("--horizon-h", type=float, default=ForecastLimits().horizon_s / 3600)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", help="write a PNG of forecast vs real waits here")
    a = ap.parse_args()
    drawn: dict[str, list[tuple[float, float | None, float | None]]] = {}
    start = datetime.date.fromisoformat(a.start)
    end = start + datetime.timedelta(days=a.days)
    every_job = read_trace(a.trace)
    jobs = filter_jobs(every_job, str(start), str(end), "top:5")
    teams = {j.tenant for j in jobs}
    # what a server would have learned before: the runs of these teams that ended in the
    # `--history-days` before the replay (by end time, oldest first)
    before = filter_jobs(
        every_job, str(start - datetime.timedelta(days=a.history_days)), str(start), "top:15"
    )
    t0 = jobs[0].submit if jobs else 0.0
    history = [
        PastRun(j.user, j.tenant, WorkloadKind.JOB, j.gpus * 1000, j.duration)
        for j in sorted(before, key=lambda j: j.submit + j.duration)
        if j.tenant in teams and j.submit + j.duration <= t0
    ]
    limits = ForecastLimits(horizon_s=a.horizon_h * 3600, window=a.window or None)
    out: dict = {
        "trace": f"{a.start} + {a.days} days, top 5 teams",
        "jobs": len(jobs),
        "learned_before": len(history),
    }
    for pol in a.policies.split(","):
        scen = trace_scenario(jobs, policy=Policy(pol), load=a.load)
        c0 = time.process_time()
        sim = ForecastingSim(scen, every=a.every, most=a.max, limits=limits, history=history)
        sim.run()
        out[pol] = score(sim) | {
            "gpus": scen.capacity_milli // 1000,
            "waiting_at_submit": sim.seen_waiting,
            "replay_cpu_s": round(time.process_time() - c0, 1),
        }
        drawn[pol] = points(sim)
        if not a.json:
            print(pol, out[pol], flush=True)
    if a.plot:
        plot(a.plot, drawn)
    if a.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
