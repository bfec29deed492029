"""A seeded synthetic workload of many short, small jobs in bursts (issue 32, goal 6).

The Philly trace is weeks of long jobs from a few large teams. This generator has the other
character, the one of a busy shared cluster's few hours: tens of thousands of jobs of
minutes, almost all of one GPU, submitted in bursts (sweeps, retries: one user, one
request, run times of one scale; sizes heavy-tailed) by many users of several teams, with
busy periods where bursts come four times as often, plus a few wide jobs (16 to 64 GPUs)
that run longer. The cluster is sized
by the replay (`gpupool.sim.trace.gpus_for_load`, e.g. 120% load); every job checkpointing
is the replay's `--checkpointing`.

`burst_jobs(seed)` returns `TraceJob`s (the same rows a CSV trace gives), so a replay is
`trace_scenario(burst_jobs(seed), load=1.2, checkpointing=True)`;
`write_csv(jobs, path)` writes them as a generic trace (`gpupool simulate --trace`).
Same seed and parameters: the same jobs, on every machine.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

from gpupool.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class BurstShape:
    """Parameters of the workload; the defaults follow issue 32's description of a held-out
    production trace (not in the repository), not a fit to it."""

    hours: float = 4.0
    #: jobs to generate (on average over seeds)
    jobs: int = 20_000
    tenants: int = 12
    users: int = 240
    #: median run time of a small job (s), and the spread of its log
    median_s: float = 300.0
    sigma: float = 1.1
    #: longest run time of a small job (s)
    max_s: float = 3 * 3600.0
    #: jobs per burst: Pareto with this shape (heavy-tailed: most bursts are a few jobs, a
    #: few are sweeps of hundreds), at most `burst_max`; the spread of submit times in one (s)
    burst_alpha: float = 1.4
    burst_max: int = 400
    burst_spread_s: float = 300.0
    #: GPUs of small jobs and their weights
    small_gpus: tuple[tuple[int, float], ...] = ((1, 0.90), (2, 0.05), (4, 0.03), (8, 0.02))
    #: fraction of bursts that are one wide job instead, their GPUs and median run time (s)
    wide_fraction: float = 0.004
    wide_gpus: tuple[int, ...] = (16, 32, 64)
    wide_median_s: float = 1800.0
    #: busy periods: this many, each this long (s), where bursts come `storm_rate` x as often
    storms: int = 3
    storm_s: float = 1200.0
    storm_rate: float = 4.0


def _pick(rng: random.Random, weighted: tuple[tuple[int, float], ...]) -> int:
    x = rng.random() * sum(w for _, w in weighted)
    for v, w in weighted:
        x -= w
        if x <= 0:
            return v
    return weighted[-1][0]


def _mean_burst(s: BurstShape) -> float:
    """Mean of min(floor(Pareto(alpha)), max) (exact sum of the tail probabilities)."""
    return sum(min(1.0, k**-s.burst_alpha) for k in range(1, s.burst_max + 1))


def burst_jobs(seed: int = 1, shape: BurstShape | None = None) -> list[TraceJob]:
    """The workload of `seed`: jobs sorted by submit time (seconds from 0), ids `b<n>`,
    tenants `t00`.. (sizes Zipf-like), users `u000`.. (each in one tenant, activity
    heavy-tailed)."""
    s = shape or BurstShape()
    rng = random.Random(seed)
    span = s.hours * 3600.0
    tenant_w = [1.0 / (k + 1) for k in range(s.tenants)]
    users = []  # (name, tenant, activity)
    for u in range(s.users):
        k = rng.choices(range(s.tenants), weights=tenant_w)[0]
        users.append((f"u{u:03d}", f"t{k:02d}", rng.paretovariate(1.2)))
    user_w = [a for _, _, a in users]
    storms = [rng.uniform(0, span - s.storm_s) for _ in range(s.storms)]

    def rate(t: float) -> float:
        return s.storm_rate if any(a <= t < a + s.storm_s for a in storms) else 1.0

    # bursts on [0, span): a Poisson process thinned by rate(t) / storm_rate
    mean_rate = (span + (s.storm_rate - 1) * s.storms * s.storm_s) / span
    n_bursts = s.jobs / _mean_burst(s)
    lam_max = n_bursts / span * s.storm_rate / mean_rate
    jobs: list[TraceJob] = []
    t = 0.0
    while True:
        t += rng.expovariate(lam_max)
        if t >= span:
            break
        if rng.random() > rate(t) / s.storm_rate:
            continue
        name, tenant, _ = users[rng.choices(range(s.users), weights=user_w)[0]]
        if rng.random() < s.wide_fraction:
            gpus = rng.choice(s.wide_gpus)
            dur = min(rng.lognormvariate(math.log(s.wide_median_s), 0.6), 4 * s.wide_median_s)
            jobs.append(TraceJob(f"b{len(jobs)}", t, round(dur), tenant, name, gpus, 0))
            continue
        size = min(int(rng.paretovariate(s.burst_alpha)), s.burst_max)
        gpus = _pick(rng, s.small_gpus)
        base = rng.lognormvariate(math.log(s.median_s), s.sigma)
        for _ in range(size):
            at = min(t + rng.uniform(0, s.burst_spread_s), span - 1)
            dur = min(max(20.0, base * rng.lognormvariate(0, 0.3)), s.max_s)
            jobs.append(TraceJob(f"b{len(jobs)}", at, round(dur), tenant, name, gpus, 0))
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def write_csv(jobs: list[TraceJob], path: str | Path) -> None:
    """Write `jobs` as a generic trace (submit_time, duration, num_gpus, tenant, id, user)."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "submit_time", "duration", "num_gpus", "tenant", "user"])
        for j in jobs:
            w.writerow([j.id, f"{j.submit:.1f}", f"{j.duration:g}", j.gpus, j.tenant, j.user])
