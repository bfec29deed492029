"""examples/mixed-pool.yaml replayed: one pool over a workstation (local engine), a Slurm
partition and a Kubernetes pool. Placement follows the engines' labels and the pins, and the
quota tree and reclaim work across engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.sim.engine import simulate
from gpupool.sim.scenario import ScenarioError, load_scenario, parse_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mixed-pool.yaml"


def test_a_mixed_pool_places_by_engine_and_reclaims_across_engines():
    r = simulate(load_scenario(EXAMPLE))
    rec = r.records
    assert all(x.workload.state == "succeeded" for x in rec.values())
    # fractions only where GPUs are shared: the workstation
    assert {rec[f"notebook-{i}"].allocation.node for i in range(4)} == {"ws"}
    # the gang on two Slurm nodes (the only engine that runs multi-node work), at once
    train = rec["train"].allocation
    assert sorted(train.nodes) == ["slurm-2", "slurm-3"] and rec["train"].first_start == 10
    # pinned to kubernetes and zone a
    assert rec["serve"].allocation.node.startswith("kube-a-")
    # lab-a's eval, pinned to slurm where lab-b borrows every free GPU, reclaims one after
    # reclaim_after_s (600 s from its submission at 30 s); the victim is lab-b's work
    assert rec["eval"].first_start == 630 and rec["eval"].allocation.node.startswith("slurm-")
    assert r.preemptions == 1
    assert sum(rec[f"borrow-{i}"].workload.preemptions for i in range(16)) == 1


def _scenario(**workload) -> dict:
    return {
        "cluster": {
            "nodes": [
                {"name": "ws", "gpus": 2, "engine": "local"},
                {"name": "k", "count": 2, "gpus": 4, "engine": "kubernetes"},
            ]
        },
        "tenants": [{"name": "lab"}],
        "workloads": [{"id": "w", "tenant": "lab", "duration": 60, **workload}],
    }


@pytest.mark.parametrize(
    "workload,said",
    [
        ({"gpus": 1, "engine": "slurm"}, "pinned to engine slurm: no node of it is registered"),
        ({"gpus": 1, "node_labels": {"zone": "a"}}, "needs node label zone=a: no node has it"),
        (
            {"nodes": 2, "gpus_per_node": 1},
            "needs several nodes at once: no engine here runs multi-node work",
        ),
        (
            {"gpus": 3, "engine": "local"},
            "pinned to engine local; needs 3 GPUs on one node; the most any node has is 2",
        ),
    ],
)
def test_a_pin_no_node_could_satisfy_is_a_scenario_error(workload, said):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(_scenario(**workload))
    assert said in str(e.value)
