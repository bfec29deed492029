"""Tenant limits over the whole ancestor chain, and per-user caps."""

import pytest

from gpupool.scheduler import Policy, SchedulerConfig, cycle
from tests.scheduler.builders import job, node, running, snapshot, tenant, tree

N = [node("a-0"), node("a-1")]


@pytest.mark.parametrize(
    "tenants, run, pending, admitted, reasons",
    [
        pytest.param(
            [tenant("lab-a", 0, limit=8)],
            [("r1", "lab-a", "alice", 6)],
            [job("j1", "lab-a", gpus=2, submit=1), job("j2", "lab-a", gpus=1, submit=2)],
            {"j1"},
            {"j2": "lab-a is at its limit of 8 GPUs"},
            id="tenant limit counts running work and this cycle's admissions",
        ),
        pytest.param(
            [tenant("physics", 0, limit=4), tenant("physics/lab-a"), tenant("physics/lab-b")],
            [("r1", "physics/lab-b", "bob", 3)],
            [job("j1", "physics/lab-a", gpus=2)],
            set(),
            {"j1": "physics is at its limit of 4 GPUs"},
            id="a parent's limit bounds its children",
        ),
        pytest.param(
            [tenant("lab-b", 0, max_per_user=2)],
            [("r1", "lab-b", "alice", 1)],
            [
                job("j1", "lab-b", "alice", gpus=2),
                job("j2", "lab-b", "bob", gpus=2, submit=1),
                job("j3", "lab-b", "alice", fraction=0.5, gpu_gib=1, submit=2),
            ],
            {"j2"},
            {"j1": "alice is at the per-user cap of 2 GPUs in lab-b"},
            id="per-user cap",
        ),
        pytest.param(
            [tenant("lab-a", 0, limit=4)],
            [],
            [job("big", "lab-a", gpus=2), job("small", "lab-a", gpus=1, submit=1)] * 1
            + [job("x", "lab-a", gpus=2, submit=2)],
            {"big", "small"},
            {"x": "lab-a is at its limit of 4 GPUs"},
            id="smaller work of a tenant still fits under the limit",
        ),
    ],
)
def test_limits(tenants, run, pending, admitted, reasons):
    rw = [running(job(i, t, u, gpus=g), N[0], range(g)) for i, t, u, g in run]
    d = cycle(snapshot(N, tree(*tenants), rw), pending, 0.0)
    assert {a.workload_id for a in d.admissions} == admitted
    for wid, text in reasons.items():
        assert d.pending[wid].reason.startswith(text), d.pending[wid].reason


def test_request_above_the_limit_is_unschedulable_not_pending_forever():
    d = cycle(snapshot(N, [tenant("lab-a", 0, limit=2)]), [job("j", gpus=4)], 0.0)
    assert d.unschedulable["j"] == (
        "asks for 4 GPUs but lab-a's limit is 2 GPUs; ask for at most 2 GPUs or ask an admin "
        "to raise it"
    )
    d = cycle(snapshot(N, [tenant("lab-a", 0, max_per_user=1)]), [job("j", gpus=2)], 0.0)
    assert d.unschedulable["j"] == (
        "asks for 2 GPUs but the per-user cap in lab-a is 1 GPU; ask for at most 1 GPU or ask "
        "an admin to raise it"
    )
    # a limit of 0 (lowered while the work waited): nothing smaller fits; an admin must act
    d = cycle(snapshot(N, [tenant("lab-a", 0, limit=0)]), [job("j", gpus=1)], 0.0)
    assert d.unschedulable["j"] == (
        "asks for 1 GPU but lab-a's limit is 0 GPUs; ask an admin to raise it"
    )


def test_fifo_and_las_ignore_quotas():
    t = [tenant("lab-a", 0, limit=1, max_per_user=1)]
    for policy in (Policy.FIFO, Policy.LAS):
        d = cycle(
            snapshot(N, t),
            [job("j1", gpus=4), job("j2", gpus=4, submit=1)],
            0.0,
            SchedulerConfig(policy=policy),
        )
        assert len(d.admissions) == 2


def test_limit_check_names_the_nearest_limit_then_a_parents_per_user_cap():
    """`limit_check` over the chain: the nearest tenant limit that breaks first; per-user caps
    (also a parent's) only when no limit does; the texts carry the use."""
    from gpupool.scheduler.limits import TENANT, USER, Usage, limit_check

    t = tree(
        tenant("physics", 0, limit=6, max_per_user=3),
        tenant("physics/lab-a", 0, limit=4),
        tenant("physics/lab-b"),
    )
    usage = Usage(t)
    usage.add("physics/lab-a", "alice", 3000)
    assert limit_check(usage, "physics/lab-a", "bob", 1000) is None
    hit = limit_check(usage, "physics/lab-a", "alice", 1000)
    assert hit is not None and (hit.scope, hit.tenant) == (USER, "physics")
    assert hit.why == "alice is at the per-user cap of 3 GPUs in physics"
    usage.add("physics/lab-b", "carol", 2000)
    hit = limit_check(usage, "physics/lab-a", "bob", 2000)  # both limits break: the nearest
    assert hit is not None and (hit.scope, hit.tenant) == (TENANT, "physics/lab-a")
    assert hit.why == "physics/lab-a is at its limit of 4 GPUs (3 GPUs in use)"
    hit = limit_check(usage, "physics/lab-b", "dave", 2000)  # lab-b has none: the parent's
    assert hit is not None and hit.why == "physics is at its limit of 6 GPUs (5 GPUs in use)"
    assert limit_check(usage, "physics/lab-b", "dave", 0) is None
