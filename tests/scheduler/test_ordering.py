"""Queue order under each policy: fair, fifo and las."""

import pytest

from gpupool.scheduler import Policy, SchedulerConfig, cycle
from gpupool.scheduler.types import BorrowOrder
from tests.scheduler.builders import job, node, placed, running, snapshot, tenant

FIFO = SchedulerConfig(policy=Policy.FIFO)
LAS = SchedulerConfig(policy=Policy.LAS)


def admitted(d):
    return [a.workload_id for a in d.admissions]


def test_fair_serves_the_tenant_furthest_below_its_share_first():
    n = node("n", gpus=8)
    # lab-a already holds 4 of its 4-GPU share; lab-b holds none of its 4
    run = [running(job(f"r{i}", "lab-a", gpus=1), n, [i]) for i in range(4)]
    pending = [
        job("a1", "lab-a", gpus=2, submit=0),
        job("b1", "lab-b", "bob", gpus=2, submit=5),
        job("b2", "lab-b", "bob", gpus=2, submit=6),
    ]
    d = cycle(snapshot([n], [tenant("lab-a", 4), tenant("lab-b", 4)], run), pending, 0.0)
    assert admitted(d) == ["b1", "b2"]  # several admissions per tenant in one cycle
    assert d.pending["a1"].reason.startswith("no node has 2 free GPUs")


def test_fair_interleaves_tenants_as_they_get_admissions():
    n = node("n", gpus=4)
    pending = [job(f"a{i}", "lab-a", gpus=1, submit=i) for i in range(4)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=10 + i) for i in range(4)
    ]
    d = cycle(snapshot([n], [tenant("lab-a", 2), tenant("lab-b", 2)]), pending, 0.0)
    assert sorted(admitted(d)) == ["a0", "a1", "b0", "b1"]


def test_fair_inside_a_tenant_priority_then_submit_time():
    n = node("n", gpus=2)
    pending = [
        job("old", gpus=1, submit=0),
        job("urgent", gpus=1, submit=50, priority=10),
        job("newer", gpus=1, submit=10),
    ]
    d = cycle(snapshot([n], [tenant("lab-a")]), pending, 0.0)
    assert admitted(d) == ["urgent", "old"]
    assert d.pending["newer"].position == 1


def test_fair_weights_decide_who_gets_idle_capacity():
    n = node("n", gpus=8)
    pending = [job(f"a{i}", "lab-a", gpus=1, submit=i) for i in range(8)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=i) for i in range(8)
    ]
    t = [tenant("lab-a", 0, weight=1), tenant("lab-b", 0, weight=3)]
    d = cycle(snapshot([n], t), pending, 0.0)
    got = admitted(d)
    assert sum(w.startswith("a") for w in got) == 2
    assert sum(w.startswith("b") for w in got) == 6


def test_fifo_is_submit_order_greedy_whole_gpus():
    n = node("n", gpus=4, sharing="shared")
    pending = [
        job("big", gpus=4, submit=0, priority=0),
        job("frac", "lab-b", "bob", fraction=0.25, gpu_gib=1, submit=1, priority=100),
        job("one", gpus=1, submit=2),
    ]
    # no quotas, priority ignored: big first; frac needs a whole GPU and there is none
    d = cycle(snapshot([n], [tenant("lab-a"), tenant("lab-b")]), pending, 0.0, FIFO)
    assert admitted(d) == ["big"]
    d = cycle(snapshot([n], [tenant("lab-a"), tenant("lab-b")]), pending[1:], 0.0, FIFO)
    # greedy: the fraction is rounded up to one whole GPU
    assert placed(d)["frac"] == ("n", ((0, 1000),))
    assert admitted(d) == ["frac", "one"]


def test_fifo_skips_what_does_not_fit_greedily():
    n = node("n", gpus=4)
    run = [running(job("r", gpus=2), n, [0, 1])]
    pending = [job("big", gpus=4, submit=0), job("small", gpus=1, submit=1)]
    d = cycle(snapshot([n], [tenant("lab-a")], run), pending, 0.0, FIFO)
    assert admitted(d) == ["small"]  # a plain scheduler lets small work pass big work


def test_fifo_has_no_preemption_even_for_guarantees():
    n = node("n", gpus=2)
    run = [running(job("r", "lab-b", "bob", gpus=2), n, [0, 1])]
    d = cycle(
        snapshot([n], [tenant("lab-a", 2), tenant("lab-b")], run),
        [job("a", gpus=2)],
        1000.0,
        FIFO,
    )
    assert d.preemptions == () and d.admissions == ()


def test_las_serves_the_tenant_with_least_attained_service_first():
    n = node("n", gpus=2)
    pending = [
        job("a1", "lab-a", gpus=1, submit=0),
        job("a2", "lab-a", gpus=1, submit=1),
        job("b1", "lab-b", "bob", gpus=1, submit=5),
        job("b2", "lab-b", "bob", gpus=1, submit=6),
    ]
    t = [tenant("lab-a", 100), tenant("lab-b")]  # quotas play no part
    snap = snapshot([n], t, attained={"lab-a": 5e6, "lab-b": 1e3})
    d = cycle(snap, pending, 0.0, LAS)
    assert admitted(d) == ["b1", "b2"]
    snap = snapshot([n], t, attained={"lab-a": 0, "lab-b": 1e3})
    assert admitted(cycle(snap, pending, 0.0, LAS)) == ["a1", "a2"]


def test_las_inside_a_tenant_least_attained_job_first():
    n = node("n", gpus=1)
    pending = [job("old", gpus=1, submit=0), job("fresh", gpus=1, submit=9)]
    snap = snapshot([n], [tenant("lab-a")], attained={"old": 7200e3})
    d = cycle(snap, pending, 0.0, LAS)
    assert admitted(d) == ["fresh"]


def test_positions_are_per_tenant_queue():
    n = node("n", gpus=1)
    pending = [job(f"a{i}", gpus=1, submit=i) for i in range(3)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=i) for i in range(2)
    ]
    d = cycle(snapshot([n], [tenant("lab-a", 1), tenant("lab-b")]), pending, 0.0)
    assert admitted(d) == ["a0"]
    assert [d.pending[w].position for w in ("a1", "a2", "b0", "b1")] == [1, 2, 1, 2]
    assert d.pending["a1"].tenant_position != d.pending["b0"].tenant_position


@pytest.mark.parametrize(
    ("order", "attained", "first"),
    [
        # lab-a borrows 1 GPU now, lab-b none: max-min on holdings serves lab-b
        (BorrowOrder.USAGE, {"lab-a": 0.0, "lab-b": 9e9}, "b1"),
        # but lab-a has used far less so far: least attained service serves lab-a
        (BorrowOrder.SERVICE, {"lab-a": 0.0, "lab-b": 9e9}, "a1"),
        (BorrowOrder.SERVICE, {"lab-a": 9e9, "lab-b": 0.0}, "b1"),
        # service is per unit of weight: lab-b's weight 3 makes its 2.5e9 count as less
        (BorrowOrder.SERVICE, {"lab-a": 1e9, "lab-b": 2.5e9}, "b1"),
        # no history: holdings decide
        (BorrowOrder.SERVICE, {}, "b1"),
    ],
)
def test_fair_borrowers_ranked_by_borrow_order(order, attained, first):
    n = node("n", gpus=4)
    # both at or over their guarantee of 1; one GPU is free
    run = [
        running(job("ra0", "lab-a", gpus=1), n, [0]),
        running(job("ra1", "lab-a", gpus=1), n, [1]),
        running(job("rb0", "lab-b", "bob", gpus=1), n, [2]),
    ]
    pending = [job("a1", "lab-a", gpus=1, submit=0), job("b1", "lab-b", "bob", gpus=1, submit=5)]
    t = [tenant("lab-a", 1, weight=1), tenant("lab-b", 1, weight=3)]
    d = cycle(snapshot([n], t, run, attained), pending, 0.0, SchedulerConfig(borrow_order=order))
    assert admitted(d) == [first]


def test_fair_tenant_below_its_guarantee_goes_before_a_borrower_with_less_service():
    n = node("n", gpus=3)
    run = [
        running(job("ra0", "lab-a", gpus=1), n, [0]),
        running(job("rb0", "lab-b", "bob", gpus=1), n, [1]),
    ]
    pending = [job("a1", "lab-a", gpus=1, submit=0), job("b1", "lab-b", "bob", gpus=1, submit=5)]
    t = [tenant("lab-a", 1), tenant("lab-b", 2)]  # lab-a at its guarantee, lab-b below
    d = cycle(snapshot([n], t, run, {"lab-a": 0.0, "lab-b": 9e9}), pending, 0.0)
    assert admitted(d) == ["b1"]
