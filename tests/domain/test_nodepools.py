"""Node pools (issue 34): a pool's definition is checked, its nodes change state only along
the table, and a request ends once."""

import pytest
from tests.pools import h100_pool

from gpupool.domain import IllegalTransition, ValidationError
from gpupool.domain.nodepools import (
    NodePool,
    NodeRequest,
    PoolNode,
    PoolNodeState,
    RequestState,
    pool_node_transition,
    request_transition,
)

P = PoolNodeState


def test_a_valid_pool_keeps_its_fields_and_sorts_labels():
    p = h100_pool(labels=(("zone", "b"), ("cloud", "aws")), cost_per_gpu_hour=2.5)
    assert p.labels == (("cloud", "aws"), ("zone", "b"))
    assert p.gpu_milli == 8000
    assert p.cost_per_node_hour() == 20.0


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        (dict(max_nodes=1, min_nodes=2), "max_nodes", "below min_nodes"),
        (dict(max_nodes=0), "max_nodes", ">= 1"),
        (dict(min_nodes=-1), "min_nodes", ">= 0"),
        (dict(boot_seconds=0), "boot_seconds", "above 0"),
        (dict(boot_seconds=-5), "boot_seconds", "above 0"),
        (dict(cost_per_gpu_hour=-0.01), "cost_per_gpu_hour", ">= 0"),
        (dict(cost_per_gpu_hour=float("nan")), "cost_per_gpu_hour", ">= 0"),
        (dict(cpu_milli=0), "cpus", "could run no workload"),
        (dict(memory_mib=0), "memory_mib", "could run no workload"),
        (dict(gpu_model=""), "gpu_model", "which GPU model"),
        (dict(gpus=0), "gpus", "gpu_model without gpus"),
        (dict(gpus=-1), "gpus", ">= 0"),
        (dict(request_timeout_seconds=60), "request_timeout_seconds", "shorter than"),
        (dict(idle_seconds=-1), "idle_seconds", ">= 0"),
        (dict(labels=(("bad key!", "x"),)), "labels", "label key"),
    ],
)
def test_bad_pools_are_refused_with_the_field_and_what_to_do(kw, field, words):
    with pytest.raises(ValidationError) as e:
        h100_pool(**kw)
    assert e.value.field == field
    assert words in str(e.value)


@pytest.mark.parametrize("name", ["GPU", "-a", "a_b", "", "x" * 64])
def test_pool_names_are_dns_labels(name):
    with pytest.raises(ValidationError, match="lowercase letters"):
        h100_pool(name=name)


def test_a_cpu_pool_needs_no_gpu_model():
    p = NodePool("cpu", gpus=0, cpu_milli=32_000, memory_mib=128_000)
    assert p.cost_per_node_hour() == 0.0


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (P.POWERED_DOWN, P.REQUESTED),
        (P.REQUESTED, P.BOOTING),
        (P.BOOTING, P.UP),
        (P.UP, P.POWERED_DOWN),
        (P.REQUESTED, P.POWERED_DOWN),
        (P.BOOTING, P.POWERED_DOWN),
    ],
)
def test_allowed_node_transitions(old, new):
    assert pool_node_transition("n1", old, new) is new


@pytest.mark.parametrize(
    ("old", "new"),
    [(P.UP, P.BOOTING), (P.UP, P.REQUESTED), (P.BOOTING, P.REQUESTED), (P.UP, P.UP)],
)
def test_illegal_node_transitions_name_the_node_and_what_is_allowed(old, new):
    with pytest.raises(IllegalTransition, match=f"'n1' cannot go from {old} to {new}"):
        pool_node_transition("n1", old, new)


def test_a_node_that_comes_up_is_idle_from_then():
    n = PoolNode("n1", "gpu-h100", P.BOOTING, since=10.0).moved(P.UP, 250.0)
    assert (n.state, n.since, n.idle_since) == (P.UP, 250.0, 250.0)
    down = n.moved(P.POWERED_DOWN, 900.0)
    assert down.idle_since is None
    with pytest.raises(IllegalTransition):
        down.moved(P.BOOTING, 901.0).moved(P.REQUESTED, 902.0)


def test_a_request_ends_once():
    assert request_transition("r1", RequestState.OPEN, RequestState.WITHDRAWN)
    with pytest.raises(IllegalTransition, match="is withdrawn"):
        request_transition("r1", RequestState.WITHDRAWN, RequestState.FULFILLED)
    with pytest.raises(ValidationError):
        NodeRequest("r", "p", 0, (), 0.0)
    r = NodeRequest("r", "gpu-h100", 1, ("w1",), requested_at=100.0)
    assert r.deadline(h100_pool()) == 1900.0
