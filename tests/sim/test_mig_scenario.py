"""MIG in scenarios: nodes with `mig_layout`, workloads with `mig`, and what is refused."""

from __future__ import annotations

import pytest

from gpupool.sim.scenario import ScenarioError, load_scenario, parse_scenario

from .builders import by_id, node, run, scenario, tenant

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"


def mig_node(**kw):
    return node("m", gpus=1, gpu_memory_gib=80, sharing="mig", **kw)


def test_instances_are_held_one_by_one_and_the_next_waits_for_one_to_free():
    data = scenario(
        nodes=[mig_node(mig_layout="all-3g.40gb")],
        workloads=[
            {"id": f"w{i}", "tenant": "a", "submit": i, "duration": 100, "mig": "3g.40gb"}
            for i in range(3)
        ],
    )
    r = by_id(run(data))
    assert r["w0"].first_start == 0 and r["w1"].first_start == 1
    assert r["w2"].first_start == 100  # waits until w0 frees its instance
    assert all(x.state == "succeeded" for x in r.values())
    assert {r[w].allocation.shares[0].mig_start for w in ("w0", "w1")} == {0, 4}


def test_a_layout_that_does_not_fit_the_model_is_a_problem():
    data = scenario(nodes=[mig_node(mig_layout="all-1g.5gb")])
    says = "mig_layout: .*H100-80GB has no MIG profile 1g.5gb; use all-1g.10gb"
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(data)
    data = scenario(nodes=[node("e", mig_layout="all-1g.10gb")])
    with pytest.raises(ScenarioError, match="needs sharing: mig"):
        parse_scenario(data)


def test_a_profile_no_layout_has_can_never_run():
    data = scenario(
        nodes=[mig_node(mig_layout="all-1g.10gb")],
        tenants=[tenant("a")],
        workloads=[{"id": "w", "tenant": "a", "duration": 1, "mig": "3g.40gb"}],
    )
    with pytest.raises(ScenarioError, match="has a 3g.40gb instance"):
        parse_scenario(data)


def test_the_mig_example_runs_every_workload():
    s = load_scenario(EXAMPLES / "mig-slices.yaml")
    from gpupool.sim.engine import simulate

    res = simulate(s)
    assert all(r.state == "succeeded" for r in res.records.values())
    assert s.nodes[0].gpus[0].mig_layout == "all-1g.10gb"
