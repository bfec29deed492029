"""Service levels relative to the pool's run lengths in a replay (SchedulerConfig
.service_levels_relative, gpupool.scheduler.levelscale): the simulator keeps the window of
runs it started (gpupool.sim.relative), passes their Kaplan-Meier scale in
Snapshot.service_scale, and its level wake-ups follow the ladder it gives."""

from __future__ import annotations

from gpupool.sim.engine import Simulator
from gpupool.sim.relative import RelativeLevels
from gpupool.sim.scenario import parse_scenario
from tests.sim.builders import by_id, job, node, run, scenario


def data(**sched):
    # 60 jobs of 100 GPU-seconds finish first (the pool's scale); then a 4-GPU job runs
    # from t=2,000 and a fresh 1-GPU job of the same tenant comes at t=3,000, when the long
    # one has 4,000 GPU-seconds: level 1 of the absolute 0.5 / 5 / 50 GPU-hour ladder, but
    # level 2 of 1 / 10 x the scale (100 and 1,000)
    short = [job(f"s{i}", submit=i * 25.0, duration=100, checkpointing=True) for i in range(60)]
    long = job("long", submit=2000, duration=10_000, gpus=4, checkpointing=True)
    fresh = job("fresh", submit=3000, duration=100, checkpointing=True)
    return scenario([node()], None, [*short, long, fresh], min_runtime_s=0, **sched)


def test_the_replays_own_runs_set_the_levels():
    # absolute: the long job is stopped only once it reaches 5 GPU-hours (18,000 GPU-s)
    absolute = by_id(run(data(service_levels_relative=[])))
    assert absolute["fresh"].first_start == 6500
    # relative: it is two levels above the fresh job at once, and stopped for it
    relative = by_id(run(data(service_levels_relative=[1, 10])))
    assert relative["fresh"].first_start == 3000
    assert relative["long"].workload.preemptions == 1


def test_the_scale_counts_running_work_as_censored():
    sim = Simulator(parse_scenario(data(service_levels_relative=[1, 10])))
    sim.run()
    rel = sim.relative
    assert isinstance(rel, RelativeLevels)
    assert rel.scale.scale == 100.0 and rel.scale.changes == 1
    assert len(rel.started) == 62 and len(rel.finished) == 62
    # mid-replay view: a run still running is censored at what it attained
    rel2 = RelativeLevels(sim.s.config)
    rel2.start("long")
    obs = list(rel2.observations(sim.records, {}, 0.0))
    assert obs == [(sim.records["long"].service / 1000.0, False)]
