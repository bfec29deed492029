"""Node pools in the simulator (issue 34): the replay's numbers, worked out by hand on a
small scenario, for a fixed cluster and for nodes asked for on demand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.sim.autoscale import PoolPolicy, load_pool_scenario, replay_pools
from gpupool.sim.scenario import ScenarioError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-pools.yaml"


def test_fixed_and_on_demand_numbers_are_the_ones_worked_out_by_hand():
    scen, pools = load_pool_scenario(EXAMPLE)
    fixed = replay_pools(scen, PoolPolicy("fixed", tuple(pools), fixed=True))
    # 2 nodes of 8 GPUs up from 0 to the last completion (g1: 7200 + 600)
    assert fixed.span_s == 7800
    assert fixed.gpu_hours_bought == pytest.approx(16 * 7800 / 3600)
    assert fixed.cost == pytest.approx(2.0 * fixed.gpu_hours_bought)
    assert fixed.mean_wait_s == 0 and fixed.finished == 4
    # used: 4x3600 + 4x1800 + 8x600 + 16x600 GPU-seconds
    assert fixed.gpu_hours_used == pytest.approx((14400 + 7200 + 4800 + 9600) / 3600)

    demand = replay_pools(scen, PoolPolicy("on-demand", tuple(pools)))
    # j1 at 0 asks for node 1 (up at 300); j2 at 60 shares it (4 + 4 GPUs); j3 at 120 asks
    # for node 2 (up at 420); g1 at 7200 asks for 2 nodes at once (up at 7500, ends 8100)
    assert demand.node_requests == 3
    assert demand.mean_wait_s == pytest.approx((300 + 240 + 300 + 300) / 4)
    assert demand.max_wait_s == 300
    # paid: node 1 from 0 to 3900 + 600 idle, node 2 from 120 to 1020 + 600 idle, the
    # gang's 2 nodes from 7200 to 8100 (the end of the replay)
    node_s = 4500 + 1500 + 2 * 900
    assert demand.gpu_hours_bought == pytest.approx(8 * node_s / 3600)
    assert demand.cost == pytest.approx(2.0 * demand.gpu_hours_bought)
    assert demand.nodes_given_back == 2
    assert demand.gpu_hours_used == pytest.approx(fixed.gpu_hours_used)
    assert demand.utilization == pytest.approx(demand.gpu_hours_used / demand.gpu_hours_bought)


def test_a_shorter_idle_time_buys_less_and_a_lower_maximum_makes_work_wait(tmp_path):
    scen, (pool,) = load_pool_scenario(EXAMPLE)
    import dataclasses

    quick = dataclasses.replace(pool, idle_seconds=60)
    a = replay_pools(scen, PoolPolicy("idle 10m", (pool,)))
    b = replay_pools(scen, PoolPolicy("idle 1m", (quick,)))
    assert b.gpu_hours_bought < a.gpu_hours_bought
    one = dataclasses.replace(pool, max_nodes=1)
    text = EXAMPLE.read_text().replace("nodes: 2, gpus_per_node: 8", "gpus: 8")
    (tmp_path / "s.yaml").write_text(text)
    scen1, _ = load_pool_scenario(tmp_path / "s.yaml")
    c = replay_pools(scen1, PoolPolicy("max 1", (one,)))
    assert c.finished == 4 and c.peak_nodes == 1
    assert c.mean_wait_s > a.mean_wait_s


def test_bad_pools_in_a_scenario_are_listed_with_their_place(tmp_path):
    text = EXAMPLE.read_text().replace(
        "idle_seconds: 600}", "idle_seconds: 600}\n  - {name: bad, max_nodes: 0, boot_seconds: 0}"
    )
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_pool_scenario(tmp_path / "s.yaml")
    assert "node_pools[1] (bad)" in str(e.value) and "max_nodes" in str(e.value)


def test_gpupool_simulate_compares_fixed_and_on_demand():
    import json

    from typer.testing import CliRunner

    from gpupool.cli.main import app

    r = CliRunner().invoke(app, ["simulate", str(EXAMPLE), "--json"])
    assert r.exit_code == 0, r.output
    fixed, demand = json.loads(r.output)["policies"]
    assert (fixed["policy"], demand["policy"]) == ("fixed", "on demand")
    assert demand["gpu_hours_bought"] == pytest.approx(8 * 7800 / 3600)
    r = CliRunner().invoke(app, ["simulate", str(EXAMPLE)], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "on demand" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_the_pools_nodes_only_check_requests_and_leave_the_fixed_nodes_alone(tmp_path):
    """A fixed node keeps its name whatever it is (the pools' nodes are never the
    scenario's); reservations, which this replay does not run, are refused like budgets."""
    fixed = "  nodes:\n    - {name: pool-shape-mine, gpus: 8, gpu_model: H100}"
    (tmp_path / "s.yaml").write_text(EXAMPLE.read_text().replace("  nodes: []", fixed))
    scen, _ = load_pool_scenario(tmp_path / "s.yaml")
    assert [n.name for n in scen.nodes] == ["pool-shape-mine"]
    booked = "reservations:\n  - {tenant: lab-a, gpus: 8, start: 0, end: 600}\n"
    (tmp_path / "r.yaml").write_text(EXAMPLE.read_text() + booked)
    with pytest.raises(ScenarioError, match="reservations: not replayed with node_pools"):
        load_pool_scenario(tmp_path / "r.yaml")
