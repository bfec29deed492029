"""The replay engine, driven through the real scheduler on small crafted scenarios."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Share, WorkloadState
from gpupool.scheduler.types import Admission, Decisions, Policy
from gpupool.sim.engine import SimulationError, simulate
from gpupool.sim.metrics import to_json, waits
from gpupool.sim.scenario import parse_scenario
from gpupool.sim.scenario_errors import ScenarioError

from .builders import by_id, job, node, run, scenario, tenant

S = WorkloadState


def test_queued_job_starts_when_another_ends():
    r = run(scenario(workloads=[job("big", gpus=4, duration=100), job("next", submit=10, gpus=2)]))
    big, nxt = r.records["big"], r.records["next"]
    assert (big.first_start, big.workload.finished_at) == (0, 100)
    assert (nxt.first_start, nxt.workload.finished_at) == (100, 200)
    assert waits(r)["next"] == 90


@pytest.mark.parametrize("policy", list(Policy))
def test_every_admitted_workload_ends_and_nothing_is_left(policy):
    nodes = [node("x", count=2), node("s", gpus=2, gpu_model="A100", sharing="shared")]
    work = [job(f"w{i}", tenant="ab"[i % 2], submit=i * 7, duration=50 + 13 * i) for i in range(12)]
    work += [
        job("big", tenant="a", gpus=4, submit=3, duration=80),
        job("f1", tenant="b", gpus=0, gpu_fraction=0.3, gpu_model="A100", submit=5),
        job("f2", tenant="a", gpus=0, gpu_fraction=0.5, gpu_model="A100", submit=6),
    ]
    data = scenario(
        nodes=nodes,
        tenants=[tenant("a", guaranteed_gpus=5), tenant("b", guaranteed_gpus=5)],
        workloads=work,
    )
    r = run(data, policy)
    assert {rec.state for rec in r.records.values()} == {S.SUCCEEDED}
    assert not r.stuck
    for rec in r.records.values():
        assert rec.workload.finished_at - rec.last_start == rec.duration


def test_preempted_work_requeues_and_restarts_from_scratch():
    data = scenario(
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=2)],
        workloads=[
            *(job(f"a{i}", tenant="a", duration=1000) for i in range(4)),
            job("b1", tenant="b", submit=500, duration=100),
        ],
        min_runtime_s=300,
        reclaim_after_s=0,
    )
    r = run(data)
    victims = [rec for rec in r.records.values() if rec.workload.preemptions]
    assert len(victims) == 1 and r.preemptions == 1
    v = victims[0]
    assert v.state is S.SUCCEEDED
    assert v.first_start == 0 and v.last_start >= 500
    assert v.workload.finished_at == v.last_start + 1000  # progress lost: full duration again
    assert r.records["b1"].first_start == 500  # reclaimed at once, not after a's jobs end


@pytest.mark.parametrize(
    ("reclaim_after_s", "b1_starts"),
    [
        (0, 500),  # at once
        (200, 700),  # a cycle runs when b1 has waited 200 s, though nothing else happens then
        (600, 1000),  # not due before a's jobs end: no preemption at all
    ],
)
def test_reclaim_waits_for_reclaim_after_s(reclaim_after_s, b1_starts):
    data = scenario(
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=2)],
        workloads=[
            *(job(f"a{i}", tenant="a", duration=1000) for i in range(4)),
            job("b1", tenant="b", submit=500, duration=100),
        ],
        min_runtime_s=300,
        reclaim_after_s=reclaim_after_s,
    )
    r = run(data)
    assert r.records["b1"].first_start == b1_starts
    assert r.preemptions == (1 if b1_starts < 1000 else 0)


def test_non_preemptible_work_is_not_reclaimed():
    data = scenario(
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=2)],
        workloads=[
            *(job(f"a{i}", tenant="a", duration=1000, preemptible=False) for i in range(4)),
            job("b1", tenant="b", submit=500, duration=100),
        ],
    )
    r = run(data)
    assert r.preemptions == 0
    assert r.records["b1"].first_start == 1000


def test_no_requeue_leaves_victim_preempted():
    data = scenario(
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=4)],
        workloads=[
            job("a0", tenant="a", gpus=4, duration=1000, requeue=False),
            job("b1", tenant="b", submit=400, duration=100),
        ],
        reclaim_after_s=0,
    )
    r = run(data)
    assert r.records["a0"].state is S.PREEMPTED
    assert r.records["b1"].state is S.SUCCEEDED


def test_fair_serves_a_guaranteed_tenant_before_a_flooding_one_fifo_does_not():
    data = scenario(
        tenants=[tenant("a", guaranteed_gpus=2), tenant("b", guaranteed_gpus=2)],
        workloads=[
            *(job(f"a{i}", tenant="a", duration=100) for i in range(12)),
            job("b1", tenant="b", submit=1, duration=100),
        ],
        min_runtime_s=1000,  # no reclaim here: only the order of the queue differs
    )
    fair = run(data, Policy.FAIR)
    fifo = run(data, Policy.FIFO)
    assert fair.records["b1"].first_start == 100
    assert fifo.records["b1"].first_start == 300  # behind a's 12 jobs, 4 at a time
    assert fair.preemptions == fifo.preemptions == 0


def test_fifo_rounds_fractions_up_to_whole_gpus():
    data = scenario(
        nodes=[node("s", gpus=1, sharing="shared")],
        workloads=[job(f"f{i}", gpus=0, gpu_fraction=0.25, duration=10) for i in range(4)],
    )
    fair = run(data, Policy.FAIR)
    fifo = run(data, Policy.FIFO)
    assert {rec.first_start for rec in fair.records.values()} == {0}  # packed on one GPU
    assert sorted(rec.first_start for rec in fifo.records.values()) == [0, 10, 20, 30]


def test_a_request_over_the_tenant_limit_is_refused_by_the_file_as_by_the_api():
    """Before, it ran and the first cycle failed it; the submit API refuses it (one rule:
    gpupool.scheduler.feasibility), and so does the scenario file now, naming what to change."""
    data = scenario(
        tenants=[tenant("a", limit_gpus=1)],
        workloads=[job("wide", gpus=2), job("ok", duration=5)],
    )
    with pytest.raises(ScenarioError) as err:
        run(data)
    assert str(err.value) == (
        "workloads[0] (id wide): request can never run: asks for 2 GPUs but a's limit is "
        "1 GPU; ask for at most 1 GPU or ask an admin to raise it; in a scenario: raise "
        "limit_gpus of tenant a"
    )
    # under fifo no limit applies: it runs
    assert run(data, Policy.FIFO).records["wide"].state is S.SUCCEEDED


def test_no_spinning_while_work_is_blocked():
    data = scenario(
        workloads=[
            job("long", gpus=4, duration=10**7),
            *(job(f"w{i}", submit=i, duration=10) for i in range(5)),
        ],
    )
    r = run(data)
    assert len(r.cycle_ms) <= 20  # a handful of event times, not one per interval tick
    assert all(rec.state is S.SUCCEEDED for rec in r.records.values())


def test_same_scenario_same_result():
    a = to_json(run(_mixed()))
    b = to_json(run(_mixed()))
    for out in (a, b):
        out["metrics"].pop("scheduler")
        out["metrics"].pop("replay_wall_s")
    assert a == b


def _mixed() -> dict:
    return scenario(
        nodes=[node("x", count=2), node("s", gpus=2, gpu_model="A100", sharing="shared")],
        tenants=[tenant("a", guaranteed_gpus=3), tenant("b", guaranteed_gpus=3, weight=2)],
        workloads=[
            job(
                f"w{i}",
                tenant="ab"[i % 3 == 0],
                submit=i * 11 % 97,
                duration=40 + i * 17 % 300,
                gpus=1 + i % 3,
            )
            for i in range(40)
        ],
    )


def test_a_scheduler_that_over_allocates_is_caught():
    data = scenario(workloads=[job("p"), job("q")])

    def greedy(snapshot, pending, now, config):
        n = snapshot.nodes[0]
        g = n.gpus[0]
        return Decisions(
            admissions=tuple(
                Admission(w.id, Allocation(w.id, n.name, (Share(n.name, 0, g.uuid, 1000, 0),), now))
                for w in pending
            )
        )

    with pytest.raises(SimulationError, match="over-allocated"):
        simulate(parse_scenario(data), greedy)


@pytest.mark.parametrize("policy", [Policy.FIFO, Policy.FAIR])
def test_a_pending_window_gives_the_same_result_when_only_queue_heads_can_start(policy):
    work = [job(f"w{i}", tenant="ab"[i % 2], submit=i, duration=30 + i % 7) for i in range(40)]
    base = scenario(
        tenants=[tenant("a", guaranteed_gpus=2), tenant("b", guaranteed_gpus=2)], workloads=work
    )
    full = to_json(run(base, policy))
    windowed = to_json(run({**base, "scheduler": {"pending_window": 3}}, policy))
    assert full["workloads"] == windowed["workloads"]


def test_a_pending_window_does_not_let_one_request_shape_hide_another():
    # a's four 8-GPU jobs wait for the big node (b holds it); its 1-GPU job, behind them in
    # a's queue, fits on the small node at once, as the scheduler (no window) would start it
    work = [job("long", tenant="b", submit=0, duration=1000, gpus=8)]
    work += [job(f"big{i}", submit=1 + i, duration=10, gpus=8) for i in range(4)]
    work += [job("tiny", submit=5, duration=10, gpus=1)]
    base = scenario(
        nodes=[node("big", gpus=8), node("small", gpus=2)],
        tenants=[tenant("a"), tenant("b")],
        workloads=work,
    )
    full = by_id(run(base))
    windowed = by_id(run({**base, "scheduler": {"pending_window": 2}}))
    assert full["tiny"].first_start == 5
    assert windowed["tiny"].first_start == 5
    assert [windowed[f"big{i}"].first_start for i in range(4)] == [
        full[f"big{i}"].first_start for i in range(4)
    ]
