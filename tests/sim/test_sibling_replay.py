"""Siblings' service levels in a replay (SchedulerConfig.service_levels_siblings_s): the
scenario's scheduler fields reach the cycle, and the simulator's level wake-ups re-order
waiting work as a sweep's running runs pass a level."""

from __future__ import annotations

from gpupool.sim.scenario import parse_scenario
from tests.sim.builders import by_id, job, node, run, scenario


def data(**sched):
    # ann's sweep of two runs takes both GPUs of a 2-GPU node at t=0 for 2 hours and more
    # (level 1 of the absolute 0.5 / 5 / 50 GPU-hour ladder after 30 minutes: too close to
    # be preempted); ann's next run (t=300) and bob's first one (t=400) wait for a GPU
    sweep = [
        job(f"s{i}", user="ann", duration=7200 + 600 * i, checkpointing=True) for i in range(2)
    ]
    nxt = job("ann-next", user="ann", submit=300, duration=600, checkpointing=True)
    bob = job("bob-first", user="bob", submit=400, duration=600, checkpointing=True)
    return scenario([node(gpus=2)], None, [*sweep, nxt, bob], service_levels_relative=[], **sched)


def test_the_scenario_fields_reach_the_config():
    cfg = parse_scenario(
        data(
            service_levels_siblings_s=0,
            service_levels_fine_order=False,
            reclaim_checkpointing_by_service=False,
        )
    ).config
    assert cfg.service_levels_siblings_s == 0.0
    assert not cfg.service_levels_fine_order and not cfg.reclaim_checkpointing_by_service
    assert parse_scenario(data()).config.service_levels_siblings_s == 600.0


def test_the_next_run_of_a_long_sweep_starts_after_fresh_work():
    on = by_id(run(data()))
    assert on["bob-first"].first_start == 7200  # the first GPU freed
    assert on["ann-next"].first_start == 7800
    off = by_id(run(data(service_levels_siblings_s=0)))
    assert off["ann-next"].first_start == 7200  # submitted first
    assert off["bob-first"].first_start == 7800
