"""The run-length scale of relative service levels (gpupool.scheduler.levelscale): a
Kaplan-Meier quantile of recently started runs, unfinished ones censored, with hysteresis;
and the ladder of thresholds it gives in the cycle (gpupool.scheduler.levels.ladder)."""

import dataclasses

import pytest

from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.levels import ladder
from gpupool.scheduler.levelscale import MIN_EVENTS, LevelScale, km_quantile
from tests.scheduler.builders import job, node, running, snapshot, tenant

NOW = 100_000.0
N = node("n", gpus=2)
TENANTS = [tenant("lab-a", 1), tenant("lab-b", 1)]


def test_kaplan_meier_quantiles_by_hand():
    # runs of 1, 3, 4 finished; 2 and 5 still running (censored). At risk and survival:
    # t=1: 5 at risk, S = 4/5 = 0.8; t=2 censored (3 left); t=3: S = 0.8 * 2/3 = 0.533;
    # t=4: 2 at risk, S = 0.533 * 1/2 = 0.267; never below 0.267
    obs = [(1.0, True), (2.0, False), (3.0, True), (4.0, True), (5.0, False)]
    assert km_quantile(obs, 0.2) == 1.0  # S <= 0.8
    assert km_quantile(obs, 0.45) == 3.0  # S <= 0.55
    assert km_quantile(obs, 0.5) == 4.0  # S <= 0.5: 0.533 is not
    assert km_quantile(obs, 0.9) is None  # too little follow-up to reach S <= 0.1
    assert km_quantile([(2.0, False)], 0.5) is None  # nothing finished


def test_censored_runs_raise_the_estimate_over_finished_runs_alone():
    # what finished is short; the long runs are still running. The median of the finished
    # runs alone is 2; counted as censored, the long runs keep the survival up until 4
    obs = [(1.0, True), (2.0, True), (3.0, True), (4.0, True)] + [(3.5, False)] * 4
    assert km_quantile([o for o in obs if o[1]], 0.5) == 2.0
    assert km_quantile(obs, 0.5) == 4.0  # S(3) = 5/8; S(4) = 5/8 * 0 = 0


def test_ties_count_a_censored_run_at_risk_at_its_own_value():
    # two runs of 2: one finished, one censored there; n = 3 at t=2: S = 1 - 1/3
    obs = [(2.0, False), (2.0, True), (9.0, True)]
    assert km_quantile(obs, 0.3) == 2.0
    assert km_quantile(obs, 0.4) == 9.0


def finished(value: float, n: int = MIN_EVENTS) -> list[tuple[float, bool]]:
    return [(value, True)] * n


def test_the_scale_moves_only_beyond_the_hysteresis_factor():
    s = LevelScale()
    assert not s.update(finished(100.0, MIN_EVENTS - 1), 0.5, 1.5)  # too few finished runs
    assert s.scale == 0.0
    assert s.update(finished(100.0), 0.5, 1.5) and s.scale == 100.0
    assert not s.update(finished(140.0), 0.5, 1.5) and s.scale == 100.0  # within 1.5x
    assert not s.update(finished(70.0), 0.5, 1.5) and s.scale == 100.0
    assert s.update(finished(160.0), 0.5, 1.5) and s.scale == 160.0  # beyond: moves
    assert s.update(finished(100.0), 0.5, 1.5) and s.scale == 100.0  # down too
    assert s.changes == 3
    # an estimate that cannot be made (all censored) leaves the scale as it was
    assert not s.update([(1e6, False)] * 100, 0.5, 1.5) and s.scale == 100.0


def test_the_ladder_is_multiples_of_the_scale():
    cfg = SchedulerConfig(service_levels_relative=(10.0, 0.1, 1.0))
    assert ladder(cfg, 600.0) == (60.0, 600.0, 6000.0)
    assert ladder(cfg, 0.0) == cfg.service_levels_s  # no scale yet: the absolute levels
    # the default: 0.2 / 2 / 20 x the scale (the p80 run length)
    assert ladder(SchedulerConfig(), 600.0) == (120.0, 1200.0, 12000.0)
    absolute = SchedulerConfig(service_levels_relative=())
    assert ladder(absolute, 600.0) == absolute.service_levels_s
    # service levels off stay off, whatever the scale
    assert ladder(SchedulerConfig(service_levels_s=()), 600.0) == ()


def victims(d):
    return sorted(p.workload_id for p in d.preemptions)


def test_relative_levels_follow_the_pools_scale_in_the_cycle():
    # a job has run 2 GPUs x 1 h (7,200 GPU-seconds): level 1 of the absolute 1 h / 10 h
    # ladder, so fresh work (two levels apart needed) does not preempt it. At a scale of
    # 600 GPU-seconds the ladder 60 / 600 / 6,000 puts it at level 3: the fresh job of its
    # tenant takes its place
    w = dataclasses.replace(job("long", gpus=2), checkpointing=True)
    snap = snapshot([N], TENANTS, [running(w, N, [0, 1], since=NOW - 3600)])
    absolute = SchedulerConfig(
        service_levels_s=(3600.0, 36000.0), min_runtime_s=0, service_levels_relative=()
    )
    relative = dataclasses.replace(absolute, service_levels_relative=(0.1, 1.0, 10.0))
    fresh = job("short", gpus=1, submit=NOW)
    scaled = dataclasses.replace(snap, service_scale=600.0)
    assert victims(cycle(scaled, [fresh], NOW, absolute)) == []
    assert victims(cycle(scaled, [fresh], NOW, relative)) == ["long"]
    assert victims(cycle(snap, [fresh], NOW, relative)) == []  # no scale: absolute ladder


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_uncensored_estimates_are_the_empirical_quantile(q):
    obs = [(float(x), True) for x in range(1, 101)]
    assert km_quantile(obs, q) == pytest.approx(100 * q)
