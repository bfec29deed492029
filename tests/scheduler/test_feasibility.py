"""gpupool.scheduler.feasibility: the one rule for "could this ever run", and for "could N
GPUs ever be given to a tenant" (advance reservations). That every caller gives the same
answer is tests/sim/test_one_rule.py and tests/server/test_submit_rules.py."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import GPUHealth, Quota, Request, Tenant, TenantTree
from gpupool.scheduler import Policy
from gpupool.scheduler.feasibility import (
    grant_problem,
    never_runs,
    node_could_hold,
    request_shape,
)
from tests.scheduler.builders import node, tenant

NODES = [node("a", gpus=4), node("b", gpus=4), node("c", gpus=2, model="A100")]
TREE = TenantTree(
    [
        Tenant("dept", Quota.gpus(4, 6, max_per_user=2)),
        Tenant("dept/team", Quota.gpus(2, 5)),
        tenant("free"),
    ]
)


@pytest.mark.parametrize(
    "request_,policy,field",
    [
        (Request(gpu_milli=500), Policy.FIFO, None),  # a whole GPU under fifo
        (Request(gpu_milli=500), Policy.FAIR, "gpu_fraction"),  # no shared GPU
        (Request(gpus=3), Policy.FAIR, "gpus"),  # dept's per-user cap of 2
        (Request(gpus=3), Policy.LAS, None),  # las applies no caps
        (Request(gpus=5), Policy.FIFO, "gpus"),  # no node has 5
        (Request(gpus=1, cpu_milli=10**6), Policy.FIFO, "cpus"),
    ],
)
def test_never_runs_follows_the_policy(request_, policy, field):
    never = never_runs(request_, "dept/team", TREE, NODES, policy)
    assert (never.field if never else None) == field


def test_the_limit_text_says_what_to_ask_for():
    never = never_runs(Request(gpus=3), "dept/team", TREE, NODES, Policy.FAIR)
    assert never is not None and never.limit is not None
    assert never.why == (
        "asks for 3 GPUs but the per-user cap in dept is 2 GPUs; ask for at most 2 GPUs or "
        "ask an admin to raise it"
    )


def test_an_unknown_or_inner_tenant_never_runs():
    assert never_runs(Request(gpus=1), "nope", TREE, NODES, Policy.FAIR).field == "tenant"
    inner = never_runs(Request(gpus=1), "dept", TREE, NODES, Policy.FAIR)
    assert inner is not None and "only leaf tenants hold work" in inner.why


def test_with_no_node_yet_only_tenants_and_limits_refuse():
    assert never_runs(Request(gpus=64), "free", TREE, [], Policy.FAIR) is None
    assert never_runs(Request(gpus=3), "dept/team", TREE, [], Policy.FAIR) is not None


def test_fifo_shapes_a_fraction_as_one_whole_gpu():
    shape = request_shape(Request(gpu_milli=250, gpu_memory_mib=1024), Policy.FIFO)
    assert (shape.kind, shape.count, shape.gpu_milli) == ("whole", 1, 1000)
    assert request_shape(Request(gpu_milli=250), Policy.FAIR).gpu_milli == 250


@pytest.mark.parametrize(
    "who,gpus,model,field",
    [
        ("nope", 1, None, "tenant"),
        ("dept/team", 1, "V100", "model"),  # no such GPUs here
        ("dept/team", 3, "A100", "gpus"),  # 2 A100s in all
        ("dept/team", 6, None, "gpus"),  # team's limit is 5 (and 8 H100s)
        ("dept", 6, None, None),  # the per-user cap does not bound a booking
        ("free", 8, "H100", None),  # over two nodes
        ("free", 9, None, "gpus"),
    ],
)
def test_grant_problem(who, gpus, model, field):
    g = grant_problem(TREE, NODES, who, gpus, model)
    assert (g.field or None) == field, g.why
    assert (g.why is None) == (field is None)


def test_a_grant_says_whether_it_is_within_the_guarantee():
    g = grant_problem(TREE, NODES, "dept/team", 3)
    assert g.guaranteed_milli == 4000  # dept's, the most on the chain
    assert g.within_guarantee(3000) and not g.within_guarantee(5000)
    under_fifo = grant_problem(TREE, NODES, "dept/team", 6, policy=Policy.FIFO)
    assert under_fifo.why is None  # fifo applies no limits


def test_a_node_holds_whole_gpus_of_one_model_as_it_is_now():
    """The node a cycle holds for blocked work (reservations, gangs) must be one that could
    hold it: before, 2 H100s and 2 A100s counted as 4 GPUs of any model."""
    gpus = (*node("h", gpus=2).gpus, *node("a", gpus=2, model="A100").gpus)
    renumbered = tuple(dataclasses.replace(g, index=i) for i, g in enumerate(gpus))
    mixed = dataclasses.replace(node("m", gpus=4), gpus=renumbered)
    assert not node_could_hold(mixed, request_shape(Request(gpus=4), Policy.FAIR))
    assert node_could_hold(mixed, request_shape(Request(gpus=2), Policy.FAIR))
    sick = dataclasses.replace(
        node("s", gpus=2),
        gpus=(
            node("s", gpus=2).gpus[0],
            dataclasses.replace(node("s", gpus=2).gpus[1], health=GPUHealth.UNHEALTHY),
        ),
    )
    assert not node_could_hold(sick, request_shape(Request(gpus=2), Policy.FAIR))
