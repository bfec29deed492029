"""gpupool.sim.burst: the seeded workload of many short small jobs in bursts (issue 32)."""

from __future__ import annotations

import statistics
from collections import Counter

from gpupool.scheduler.types import Policy
from gpupool.sim.burst import BurstShape, burst_jobs, write_csv
from gpupool.sim.engine import simulate
from gpupool.sim.trace import gpus_for_load, read_trace, trace_scenario


def test_same_seed_same_jobs_other_seed_other_jobs():
    assert burst_jobs(3) == burst_jobs(3)
    assert burst_jobs(3) != burst_jobs(4)


def test_the_character_of_the_workload():
    jobs = burst_jobs(1)
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    gpus = Counter(j.gpus for j in jobs)
    assert 10_000 <= len(jobs) <= 40_000  # tens of thousands
    assert 3.5 * 3600 <= span <= 4 * 3600  # a few hours
    assert gpus[1] / len(jobs) >= 0.85  # mostly one GPU
    assert 120 <= statistics.median(j.duration for j in jobs) <= 900  # of minutes
    assert 0 < sum(n for g, n in gpus.items() if g > 8) < 100  # a few wide ones
    assert len({j.user for j in jobs}) >= 150  # many users
    assert len({j.tenant for j in jobs}) == BurstShape().tenants
    per_user = {j.user: j.tenant for j in jobs}
    assert all(per_user[j.user] == j.tenant for j in jobs)  # a user is in one tenant


def test_bursts_arrive_together():
    # submissions cluster: far more jobs share a minute with another job of their user
    # than independent arrivals at this rate would give
    jobs = burst_jobs(2)
    by_minute = Counter((j.user, int(j.submit // 60)) for j in jobs)
    shared = sum(n for n in by_minute.values() if n > 1)
    assert shared / len(jobs) > 0.4


def test_csv_round_trip_and_replay(tmp_path):
    shape = BurstShape(hours=0.25, jobs=300, users=20, tenants=3)
    jobs = burst_jobs(5, shape)
    path = tmp_path / "burst.csv"
    write_csv(jobs, path)
    back = read_trace(path)
    assert [(j.id, j.tenant, j.user, j.gpus, j.duration) for j in back] == [
        (j.id, j.tenant, j.user, j.gpus, j.duration) for j in jobs
    ]
    scen = trace_scenario(back, policy=Policy.FAIR, load=1.2, checkpointing=True)
    assert scen.capacity_milli // 1000 == gpus_for_load(back, 1.2)
    result = simulate(scen)
    assert not result.stuck
    assert all(r.workload.checkpointing for r in result.records.values())
