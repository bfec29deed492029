"""Relative service levels in the server (SchedulerConfig.service_levels_relative): the
scheduler loop keeps the pool's run-length scale (a `LevelScale`), estimates it from the
store's recently started runs at most every 300 s of its clock, and passes it to the cycle
in `Snapshot.service_scale`; before 50 runs have finished there is none (the absolute
levels apply). On SQLite and PostgreSQL (the `world` fixture)."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import WorkloadState
from gpupool.scheduler.levelscale import ESTIMATE_EVERY_S, MIN_EVENTS
from gpupool.server.loops import scheduler as loop_module
from gpupool.store import AllocationRepo, WorkloadRepo
from tests.store.test_attained import attempt
from tests.store.test_store import workload

S = WorkloadState


def finished_runs(world, n: int, seconds: float) -> None:
    """`n` 1-GPU runs of `seconds` that finished (`seconds` GPU-seconds each)."""
    ws = [workload(gpus=1) for _ in range(n)]
    with world.ctx.store.write() as s:
        for w in ws:
            WorkloadRepo(s).add(w)
        held = {sh.gpu_uuid for a in AllocationRepo(s).active() for sh in a.shares}
    free = next(i for i in range(3) if f"GPU-n1-{i}" not in held)  # (GPU 3 is shared)
    t = world.clock.now() - 10 * seconds
    for w in ws:
        attempt(world.ctx.store, w.id, t, t + seconds, S.SUCCEEDED, gpus=(free,))


@pytest.fixture
def seen(world, monkeypatch) -> list[float]:
    """The `service_scale` of each snapshot the loop's cycles decide on."""
    got: list[float] = []
    real = loop_module.cycle_timed

    def spy(snap, *args, **kw):
        got.append(snap.service_scale)
        return real(snap, *args, **kw)

    monkeypatch.setattr(loop_module, "cycle_timed", spy)
    return got


def test_the_loop_passes_the_scale_once_enough_runs_finished(world, seen):
    loop = world.scheduler
    finished_runs(world, MIN_EVENTS - 1, 100.0)
    world.submit(gpus=1)
    loop.run_once()
    assert seen == [0.0] and loop.level_scale.scale == 0.0  # 49 finished: no scale yet
    finished_runs(world, 1, 100.0)
    world.clock.advance(ESTIMATE_EVERY_S - 10)
    world.submit(gpus=1)
    loop.run_once()
    assert seen[-1] == 0.0  # estimated at most every 300 s: not yet read again
    world.clock.advance(10)
    world.submit(gpus=1)
    loop.run_once()
    # 50 runs of 100 GPU-seconds finished (the running ones are censored): p80 = 100, and
    # the ladder 0.2 / 2 / 20 x 100 GPU-seconds
    assert seen[-1] == 100.0 and loop.level_scale.scale == 100.0
    assert loop.snapshot()[0].service_scale == 100.0  # other loops' view too


def test_the_scale_moves_only_beyond_the_hysteresis(world):
    loop = world.scheduler
    finished_runs(world, MIN_EVENTS, 100.0)
    assert loop.service_scale(world.clock.now()) == 100.0
    # runs of 140 GPU-seconds: p80 140, within 1.5x of 100: the scale stays
    finished_runs(world, 4 * MIN_EVENTS, 140.0)
    world.clock.advance(ESTIMATE_EVERY_S)
    assert loop.service_scale(world.clock.now()) == 100.0
    # runs of 400: beyond 1.5x, it moves
    finished_runs(world, 8 * MIN_EVENTS, 400.0)
    world.clock.advance(ESTIMATE_EVERY_S)
    assert loop.service_scale(world.clock.now()) == 400.0
    assert loop.level_scale.changes == 2


def test_no_scale_without_relative_levels_or_the_fair_policy(world):
    loop = world.scheduler
    finished_runs(world, MIN_EVENTS, 100.0)
    cfg = world.ctx.settings.scheduler
    for off in (
        dataclasses.replace(cfg, service_levels_relative=()),
        dataclasses.replace(cfg, service_levels_s=()),
    ):
        world.ctx.settings = dataclasses.replace(world.ctx.settings, scheduler=off)
        assert loop.service_scale(world.clock.now()) == 0.0
    world.ctx.settings = dataclasses.replace(world.ctx.settings, scheduler=cfg)
    assert loop.service_scale(world.clock.now()) == 100.0
