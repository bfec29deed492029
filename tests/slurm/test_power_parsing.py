"""Slurm's power-saving states as gpupool reads them from `sinfo --json` (22.05: a state and
a flags list; 23+: one list), pure (issue 34 part 3; the real Slurm: test_slurm_power.py)."""

from __future__ import annotations

import pytest

from gpupool.domain import NodeState
from gpupool.domain.nodepools import POOL_LABEL, PoolNodeState, RequestState
from gpupool.engines.slurm.inventory import node_state, to_node
from gpupool.engines.slurm.power import PowerRequest, pool_of, power_state, request_state

P = PoolNodeState


def raw(state="idle", flags=(), features="", name="c1"):
    return {
        "name": name,
        "state": state,
        "state_flags": list(flags),
        "features": features,
        "active_features": features,
        "gres": "gpu:a100:4",
        "cpus": 8,
        "real_memory": 64000,
    }


@pytest.mark.parametrize(
    ("state", "flags", "want"),
    [
        ("idle", ["CLOUD", "POWERED_DOWN"], P.POWERED_DOWN),  # idle~
        ("idle", ["POWERING_DOWN"], P.POWERED_DOWN),  # idle%
        ("idle", ["CLOUD", "POWER_UP", "POWERED_DOWN"], P.REQUESTED),  # asked, not started
        ("mixed", ["CLOUD", "POWERING_UP", "NOT_RESPONDING"], P.BOOTING),  # mix#
        ("idle", ["CLOUD"], P.UP),
        ("allocated", [], P.UP),
        ("down", ["CLOUD", "POWERED_DOWN"], P.POWERED_DOWN),  # a resume that failed
        (["IDLE", "CLOUD", "POWERED_DOWN"], [], P.POWERED_DOWN),  # Slurm 23+: one list
    ],
)
def test_power_states(state, flags, want):
    assert power_state(raw(state, flags)) is want


def test_a_pool_is_named_by_a_feature():
    assert pool_of(raw(features="nvme,gpupool-pool:cloud-a")) == "cloud-a"
    assert pool_of(raw(features="gpupool-pool:")) is None
    assert pool_of(raw(features="nvme")) is None


def test_a_powered_down_node_of_a_pool_is_down_until_up_one_of_no_pool_is_reachable():
    pooled = raw("idle", ["CLOUD", "POWERED_DOWN"], "gpupool-pool:cloud")
    assert node_state(pooled) is NodeState.DOWN
    node = to_node(pooled, 16384)
    assert node.label_map[POOL_LABEL] == "cloud"
    assert node.label_map["slurm.power"] == "powered_down"
    # a site's power saving without a gpupool pool: a job placed there resumes the node
    assert node_state(raw("idle", ["POWERED_DOWN"])) is NodeState.READY
    assert node_state(raw("mixed", ["POWERING_UP", "NOT_RESPONDING"])) is NodeState.READY
    # failed resume: down whatever the pool
    assert node_state(raw("down", ["CLOUD", "POWERED_DOWN"])) is NodeState.DOWN
    up = to_node(raw("idle", ["CLOUD"], "gpupool-pool:cloud"), 16384)
    assert up.state is NodeState.READY and "slurm.power" not in up.label_map


def test_a_request_is_fulfilled_when_its_nodes_are_up_withdrawn_when_one_fails():
    req = PowerRequest("r1", "cloud", ("c1", "c2"), 0.0)
    assert request_state(req, {"c1": P.UP, "c2": P.BOOTING}, ())[0] is RequestState.OPEN
    assert request_state(req, {"c1": P.UP, "c2": P.UP}, ())[0] is RequestState.FULFILLED
    state, why = request_state(req, {"c1": P.UP, "c2": P.POWERED_DOWN}, {"c2"})
    assert state is RequestState.WITHDRAWN and "could not resume c2" in why
