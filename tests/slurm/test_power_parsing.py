"""Slurm's power-saving states as gpupool reads them from `sinfo --json` (22.05: a state and
a flags list; 23+: one list), and `SlurmNodePools`' requests over a scripted `sinfo` (the
``scontrol update`` commands it runs kept), pure (issue 34 part 3; the real Slurm:
test_slurm_power.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import NodeState
from gpupool.domain.nodepools import POOL_LABEL, NodePool, PoolNodeState, RequestState
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.inventory import node_state, to_node
from gpupool.engines.slurm.power import (
    ENDED_KEPT_S,
    PowerRequest,
    SlurmNodePools,
    pool_of,
    power_state,
    request_state,
)

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


class Sinfo:
    """A stand-in for subprocess.run: `sinfo --json` answers `nodes`; every command is kept."""

    def __init__(self, *nodes: dict) -> None:
        self.nodes = {n["name"]: n for n in nodes}
        self.calls: list[list[str]] = []

    def __call__(self, args, input=None, **kw):  # noqa: A002, ANN001, ANN003, ANN204
        self.calls.append(list(args))
        nodes = list(self.nodes.values())
        out = json.dumps({"nodes": nodes, "errors": []}) if args[0] == "sinfo" else ""
        return subprocess.CompletedProcess(args, 0, out, "")

    def updates(self) -> list[list[str]]:
        return [c[1:] for c in self.calls if c[0] == "scontrol"]


class Power(SlurmNodePools):
    def __init__(self, slurm: Sinfo) -> None:
        self.cli, self.clock = SlurmCLI("/dev/null", runner=slurm), ManualClock(1_000.0)


CLOUD = NodePool("cloud", gpus=4, gpu_model="A100", cpu_milli=8000, memory_mib=64000)
ASLEEP = ("idle", ["CLOUD", "POWERED_DOWN"], "gpupool-pool:cloud")


def test_a_request_powers_up_the_pools_powered_down_nodes_and_ends_fulfilled_when_they_are_up():
    slurm = Sinfo(raw(*ASLEEP, name="c1"), raw(*ASLEEP, name="c2"), raw(*ASLEEP, name="c3"))
    slurm.nodes["other"] = raw("idle", ["CLOUD", "POWERED_DOWN"], "gpupool-pool:else", "other")
    power = Power(slurm)
    rid = power.request_nodes(CLOUD, 2, [], atomic=False)
    assert slurm.updates() == [["update", "NodeName=c1,c2", "State=POWER_UP"]]
    slurm.nodes["c1"] = raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c1")
    slurm.nodes["c2"] = raw("mixed", ["CLOUD", "POWERING_UP"], "gpupool-pool:cloud", "c2")
    states = power.pool_states([CLOUD])
    assert [(n.name, n.state, n.request) for n in states.nodes] == [
        ("c1", P.UP, rid),
        ("c2", P.BOOTING, rid),
        ("c3", P.POWERED_DOWN, ""),
    ]
    assert [r.state for r in states.requests] == [RequestState.OPEN]
    slurm.nodes["c2"] = raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c2")
    assert [r.state for r in power.pool_states([CLOUD]).requests] == [RequestState.FULFILLED]


def test_a_request_slurm_cannot_serve_is_withdrawn_at_once_and_nothing_is_powered_up():
    slurm = Sinfo(raw(*ASLEEP, name="c1"), raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c2"))
    power = Power(slurm)
    gang = power.request_nodes(CLOUD, 2, [], atomic=True)  # one powered down: not all or none
    empty = NodePool("empty", gpus=0, cpu_milli=8000, memory_mib=64000)
    none = power.request_nodes(empty, 1, [], atomic=False)
    assert slurm.updates() == []
    (g,) = power.pool_states([CLOUD]).requests
    assert (g.request, g.state) == (gang, RequestState.WITHDRAWN)
    assert "Slurm has 1 powered-down node(s) of pool cloud" in g.message and "2 needed" in g.message
    (n,) = power.pool_states([empty]).requests
    assert (n.request, n.state) == (none, RequestState.WITHDRAWN)
    assert "feature gpupool-pool:empty" in n.message


def test_only_an_up_node_is_powered_down_and_a_withdrawn_request_stays_withdrawn():
    slurm = Sinfo(raw(*ASLEEP, name="c1"), raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c2"))
    power = Power(slurm)
    power.release_node("c1")  # powered down already
    power.release_node("nowhere")
    power.release_node("c2")
    assert slurm.updates() == [["update", "NodeName=c2", "State=POWER_DOWN"]]
    rid = power.request_nodes(CLOUD, 1, [], atomic=False)
    power.withdraw(rid)
    slurm.nodes["c1"] = raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c1")  # came up anyway
    (r,) = power.pool_states([CLOUD]).requests
    assert r.state is RequestState.WITHDRAWN and r.message == "withdrawn by gpupool"


def test_an_ended_request_is_reported_for_a_while_then_forgotten():
    slurm = Sinfo(raw(*ASLEEP, name="c1"), raw(*ASLEEP, name="c2"))
    power = Power(slurm)
    done = power.request_nodes(CLOUD, 1, [], atomic=False)
    slurm.nodes["c1"] = raw("idle", ["CLOUD"], "gpupool-pool:cloud", "c1")
    power.pool_states([CLOUD])  # fulfilled now
    power.clock.advance(60)
    waits = power.request_nodes(CLOUD, 1, [], atomic=False)  # c2: stays open
    power.clock.advance(ENDED_KEPT_S - 61)
    assert {r.request for r in power.pool_states([CLOUD]).requests} == {done, waits}
    power.clock.advance(1)
    (left,) = power.pool_states([CLOUD]).requests
    assert (left.request, left.state) == (waits, RequestState.OPEN)
    assert {n.name: n.request for n in power.pool_states([CLOUD]).nodes} == {"c1": "", "c2": waits}
