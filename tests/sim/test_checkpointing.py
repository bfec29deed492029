"""Checkpointing work in the replay: a preemption costs only `checkpoint_loss_s`, and short
work of a tenant no longer waits behind the tenant's own long work (service levels)."""

from __future__ import annotations

from gpupool.domain import WorkloadState

from .builders import job, node, run, scenario, tenant

S = WorkloadState


def _two_jobs(
    checkpointing: bool, levels: list[float] | None = None, apart: int | None = 1
) -> dict:
    """`apart` None: the scenario's default `preempt_levels_apart`."""
    sched: dict = {"checkpoint_loss_s": 60, "cycle_interval_s": 10}
    sched["service_levels_s"] = [3600, 36000] if levels is None else levels
    if apart is not None:
        sched["preempt_levels_apart"] = apart
    return scenario(
        nodes=[node("n", gpus=1)],
        tenants=[tenant("a", guaranteed_gpus=1)],
        workloads=[
            job("long", duration=20_000, checkpointing=checkpointing),
            job("short", submit=7200, duration=600),
        ],
        **sched,
    )


def test_a_checkpointing_workload_resumes_and_keeps_its_service():
    r = run(_two_jobs(True))
    long, short = r.records["long"], r.records["short"]
    assert r.preemptions == 1  # at 2 h long is at level 1, short at 0
    assert short.first_start is not None and short.first_start < 7200 + 60
    assert long.state is S.SUCCEEDED
    # it ran 20,000 s of work plus the 60 s lost to the preemption, no restart from scratch
    assert long.run_time == 20_000 + 60
    assert long.workload.finished_at == 20_000 + 60 + 600


def test_without_checkpointing_short_work_waits_behind_long_work():
    r = run(_two_jobs(False))
    assert r.preemptions == 0
    assert r.records["short"].first_start == 20_000


def test_service_levels_off_keep_the_old_order():
    r = run(_two_jobs(True, levels=[]))
    assert r.preemptions == 0
    assert r.records["short"].first_start == 20_000


def test_by_default_work_one_level_up_is_left_alone():
    # long is at level 1 at 2 h; by default victims are 2 levels up, so short waits
    r = run(_two_jobs(True, apart=None))
    assert r.preemptions == 0
    assert r.records["short"].first_start == 20_000
