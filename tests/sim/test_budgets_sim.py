"""GPU-hour budgets in scenarios (issue 35 part 2): parsed and checked like the API's,
metered on the virtual clock, and applied each cycle through the same pure code as the
server (gpupool.scheduler.timed). Scenario seconds are epoch seconds: t=0 is 1970-01-01 UTC,
so January 1970 ends at t=MONTH."""

from __future__ import annotations

import pytest

from gpupool.sim import ScenarioError, parse_scenario, simulate

H = 3600
MONTH = 31 * 86400  # 1970-02-01 00:00 UTC
SCHED = {"reclaim_after_s": 0, "min_runtime_s": 0}

# lab spends 20 GPU-hours (2 GPUs for 10 h) early in January; its budget is 10
SPEND = {"id": "spend", "tenant": "lab", "gpus": 2, "duration": 10 * H, "submit": MONTH - 40 * H}


def _scenario(workloads, budgets, tenants=None):
    return {
        "cluster": {"nodes": [{"name": "n", "gpus": 2, "gpu_model": "H100"}]},
        "tenants": tenants
        or [{"name": "lab", "guaranteed_gpus": 1}, {"name": "other", "guaranteed_gpus": 1}],
        "workloads": [SPEND, *workloads],
        "scheduler": SCHED,
        "budgets": budgets,
    }


def test_hold_holds_the_tenants_new_work_until_the_next_month():
    late = {"id": "late", "tenant": "lab", "gpus": 1, "duration": H, "submit": MONTH - 5 * H}
    plain = simulate(parse_scenario(_scenario([late], [])))
    assert plain.records["late"].first_start == MONTH - 5 * H  # GPUs are idle
    hold = [{"tenant": "lab", "gpu_hours": 10, "mode": "hold"}]
    held = simulate(parse_scenario(_scenario([late], hold)))
    # the budget resets at 1970-02-01 00:00 UTC: a cycle runs then and starts it
    assert held.records["late"].first_start == MONTH
    # work that already ran is never stopped by a hold
    assert held.records["spend"].run_time == 10 * H


def test_a_held_workload_says_when_the_budget_resets():
    late = {"id": "late", "tenant": "lab", "gpus": 1, "gpu_model": "H100", "duration": H}
    late["submit"] = MONTH - 5 * H
    zero = [{"tenant": "lab", "gpu_hours": 0, "mode": "hold", "gpu_model": "H100"}]
    r = simulate(parse_scenario(_scenario([late], zero)))
    assert r.records["late"].first_start is None  # a budget of 0 holds it every month
    reason = r.records["late"].reason or ""
    assert "over budget" in reason and "mode hold" in reason, reason
    # a budget of 0 changes at no reset: the replay ends in January, where it was held
    assert "resets at 1970-02-01 00:00 UTC" in reason, reason


def test_warn_changes_nothing():
    late = {"id": "late", "tenant": "lab", "gpus": 1, "duration": H, "submit": MONTH - 5 * H}
    warn = [{"tenant": "lab", "gpu_hours": 10, "mode": "warn"}]
    r = simulate(parse_scenario(_scenario([late], warn)))
    assert r.records["late"].first_start == MONTH - 5 * H


def test_borrow_only_runs_only_on_idle_gpus():
    # other fills both GPUs (one of them borrowed from lab's guarantee) for 5 h; lab then
    # asks for the GPU its guarantee promises
    t0 = MONTH - 20 * H
    other = {"id": "o", "tenant": "other", "gpus": 1, "duration": 5 * H, "count": 2, "submit": t0}
    mine = {"id": "mine", "tenant": "lab", "gpus": 1, "duration": H, "submit": t0 + H}
    plain = simulate(parse_scenario(_scenario([other, mine], [])))
    assert plain.records["mine"].first_start == t0 + H  # it reclaims its guarantee
    assert plain.preemptions == 1
    borrow = [{"tenant": "lab", "gpu_hours": 10, "mode": "borrow-only"}]
    r = simulate(parse_scenario(_scenario([other, mine], borrow)))
    # over budget it has no guarantee: it reclaims nothing and waits for an idle GPU
    assert r.records["mine"].first_start == t0 + 5 * H
    assert r.preemptions == 0


def test_borrow_only_work_is_preempted_first():
    # lab runs within its guarantee, guest borrows the other GPU; owner (whose guarantee
    # both sit on) then reclaims one GPU
    t0 = MONTH - 20 * H
    tenants = [
        {"name": "lab", "guaranteed_gpus": 1},
        {"name": "owner", "guaranteed_gpus": 1},
        {"name": "guest", "guaranteed_gpus": 0},
    ]
    mine = {"id": "mine", "tenant": "lab", "gpus": 1, "duration": 5 * H, "submit": t0}
    guest = {"id": "guest", "tenant": "guest", "gpus": 1, "duration": 5 * H, "submit": t0}
    owner = {"id": "owner", "tenant": "owner", "gpus": 1, "duration": H, "submit": t0 + H}
    plain = simulate(parse_scenario(_scenario([mine, guest, owner], [], tenants)))
    assert plain.records["mine"].run_time == 5 * H  # the borrower, guest, is stopped
    assert plain.records["guest"].run_time > 5 * H
    borrow = [{"tenant": "lab", "gpu_hours": 10, "mode": "borrow-only"}]
    r = simulate(parse_scenario(_scenario([mine, guest, owner], borrow, tenants)))
    assert r.records["guest"].run_time == 5 * H  # lab, over budget, is stopped instead
    assert r.records["mine"].run_time > 5 * H
    assert r.records["owner"].first_start == t0 + H


def test_the_usage_resets_with_the_period():
    # spent in January; in February the same tenant's work is not held
    feb = {"id": "feb", "tenant": "lab", "gpus": 1, "duration": H, "submit": MONTH + H}
    hold = [{"tenant": "lab", "gpu_hours": 10, "mode": "hold"}]
    r = simulate(parse_scenario(_scenario([feb], hold)))
    assert r.records["feb"].first_start == MONTH + H


@pytest.mark.parametrize(
    ("budget", "text"),
    [
        ({"tenant": "nope", "gpu_hours": 1}, "unknown tenant 'nope'"),
        ({"tenant": "lab", "gpu_hours": -1}, "gpu_hours"),
        ({"tenant": "lab", "gpu_hours": 1, "mode": "stop"}, "mode"),
        ({"tenant": "lab", "gpu_hours": 1, "period": "week"}, "period"),
        ({"tenant": "lab", "gpu_hours": 1, "colour": "red"}, "colour"),
    ],
)
def test_bad_budgets_are_refused_with_a_clear_error(budget, text):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(_scenario([], [budget]))
    assert text in str(e.value)


def test_two_budgets_for_one_tenant_and_period_are_refused():
    two = [{"tenant": "lab", "gpu_hours": 1}, {"tenant": "lab", "gpu_hours": 2}]
    with pytest.raises(ScenarioError) as e:
        parse_scenario(_scenario([], two))
    assert "a second monthly budget for lab; keep one" in str(e.value)


def test_budgets_with_node_pools_are_refused_not_ignored(tmp_path):
    from gpupool.sim.autoscale import load_pool_scenario

    f = tmp_path / "pools.yaml"
    f.write_text(
        "cluster: {nodes: []}\n"
        "tenants: [{name: lab, guaranteed_gpus: 0}]\n"
        "node_pools: [{name: p, gpus: 8, max_nodes: 2}]\n"
        "workloads: [{id: a, tenant: lab, gpus: 1, duration: 60}]\n"
        "budgets: [{tenant: lab, gpu_hours: 1, mode: hold}]\n"
    )
    with pytest.raises(ScenarioError) as e:
        load_pool_scenario(f)
    assert "budgets: not replayed with node_pools" in str(e.value)
