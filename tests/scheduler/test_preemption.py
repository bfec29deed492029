"""Reclaim: guaranteed work preempts borrowed work of other tenants, and only that."""

import dataclasses

import pytest

from gpupool.domain import Quota, Tenant
from gpupool.scheduler import SchedulerConfig, cycle
from tests.scheduler.builders import apply, job, node, running, snapshot, tenant, tree

NOW = 10_000.0
N = node("n", gpus=4)
TENANTS = [tenant("lab-a", 2), tenant("lab-b", 2)]


def borrowers(*specs, on=N):
    """lab-b work, one GPU each: (id, priority, since, preemptible)."""
    return [
        running(job(i, "lab-b", "bob", gpus=1, priority=p, preemptible=pre), on, [k], since=s)
        for k, (i, p, s, pre) in enumerate(specs)
    ]


def victims(d):
    return sorted(p.workload_id for p in d.preemptions)


def test_lowest_priority_then_newest_borrowed_work_is_preempted_and_only_as_much_as_needed():
    run = borrowers(("old", 0, 100, True), ("new", 0, 900, True), ("vip", 5, 950, True)) + [
        running(job("b4", "lab-b", "bob", gpus=1, priority=5), N, [3], since=50)
    ]
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW)
    assert victims(d) == ["new"]
    assert d.preemptions[0].for_workload == "a"
    assert "reclaims its guaranteed share" in d.preemptions[0].reason
    assert d.pending["a"].reason.startswith("reclaiming its guaranteed share")
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=2)], NOW)
    assert victims(d) == ["new", "old"]


def test_victim_is_admitted_the_next_cycle_once_freed():
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    snap = snapshot([N], TENANTS, run)
    pending = [job("a", gpus=2)]
    d1 = cycle(snap, pending, NOW)
    assert victims(d1) == ["b2", "b3"] and d1.admissions == ()
    snap, pending = apply(snap, pending, d1, NOW)
    d2 = cycle(snap, pending, NOW + 1)
    assert [x.workload_id for x in d2.admissions] == ["a"]
    assert d2.preemptions == ()


def test_non_preemptible_work_is_never_preempted():
    run = borrowers(*[(f"b{i}", 0, 100 * i, False) for i in range(4)])
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW)
    assert d.preemptions == ()
    assert "a" in d.pending


def test_work_younger_than_min_runtime_is_not_preempted():
    run = borrowers(("young", 0, NOW - 10, True), *[(f"b{i}", 0, 100, False) for i in range(3)])
    cfg = SchedulerConfig(min_runtime_s=60)
    assert cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW, cfg).preemptions == ()
    cfg = SchedulerConfig(min_runtime_s=5)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW, cfg)
    assert victims(d) == ["young"]


def test_work_within_its_own_guarantee_is_not_preempted():
    # lab-b holds exactly its guarantee of 4: nothing is borrowed
    t = [tenant("lab-a", 2), tenant("lab-b", 4)]
    n = node("n", gpus=4)
    run = borrowers(*[(f"b{i}", 0, 100, True) for i in range(4)], on=n)
    assert cycle(snapshot([n], t, run), [job("a", gpus=1)], NOW).preemptions == ()


def test_borrowing_tenant_is_taken_down_only_to_its_guarantee():
    # lab-b holds 4 with a guarantee of 3: one GPU is borrowed, so only one victim
    t = [tenant("lab-a", 4), tenant("lab-b", 3)]
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    d = cycle(snapshot([N], t, run), [job("a", gpus=2)], NOW)
    assert d.preemptions == ()  # taking 2 would cut into lab-b's guarantee
    d = cycle(snapshot([N], t, run), [job("a", gpus=1)], NOW)
    assert victims(d) == ["b3"]


def test_no_reclaim_beyond_the_candidates_own_guarantee():
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    # lab-a has a guarantee of 2; asking for 3 would borrow, so no reclaim
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=3)], NOW)
    assert d.preemptions == ()


def test_own_tenant_work_is_never_a_victim():
    n = node("n", gpus=2)
    run = [running(job(f"a{i}", "lab-a", gpus=1), n, [i], since=0) for i in range(2)]
    t = [tenant("lab-a", 4)]
    d = cycle(snapshot([n], t, run), [job("a9", gpus=1, priority=10)], NOW)
    assert d.preemptions == ()


def test_preemption_off():
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    cfg = SchedulerConfig(preemption=False)
    assert cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW, cfg).preemptions == ()


def test_victims_are_chosen_on_one_node_where_the_candidate_then_fits():
    a, b = node("a", gpus=2), node("b", gpus=2)
    run = [
        running(job("a0", "lab-b", "bob", gpus=1), a, [0], since=100),
        running(job("x", "lab-c", "carl", gpus=1), a, [1], since=100),  # within guarantee
        running(job("b0", "lab-b", "bob", gpus=1), b, [0], since=100),
        running(job("b1", "lab-b", "bob", gpus=1), b, [1], since=200),
    ]
    t = [tenant("lab-a", 2), tenant("lab-b", 0), tenant("lab-c", 1)]
    d = cycle(snapshot([a, b], t, run), [job("j", gpus=2)], NOW)
    assert victims(d) == ["b0", "b1"]  # freeing a-0 alone would not make room on node a


def test_work_already_stopping_is_waited_for_not_doubled():
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    run[3] = running(run[3].workload, N, [3], since=300, stopping=True)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1)], NOW)
    assert d.preemptions == ()
    assert d.pending["a"].reason.startswith("reclaiming its guaranteed share: waiting for 1")


def test_hierarchy_siblings_borrowing_within_their_parent_are_not_victims_of_outsiders():
    # physics (guarantee 4) holds 4 GPUs through lab-b alone, lab-b has no own guarantee.
    # bio (guarantee 2) wants 1: physics as a whole does not borrow, so no victim.
    t = tree(
        tenant("physics", 4),
        tenant("physics/lab-a", 0),
        tenant("physics/lab-b", 0),
        tenant("bio", 2),
    )
    n = node("n", gpus=4)
    run = [
        running(job(f"p{i}", "physics/lab-b", "bob", gpus=1), n, [i], since=100 + i)
        for i in range(4)
    ]
    d = cycle(snapshot([n], t, run), [job("c", "bio", "carl", gpus=1)], NOW)
    assert d.preemptions == ()
    # between siblings the branches are the siblings themselves: lab-b (no guarantee of its
    # own) borrows from lab-a, which has a guarantee of 2, so lab-a may reclaim one GPU
    t2 = tree(
        tenant("physics", 4),
        tenant("physics/lab-a", 2),
        tenant("physics/lab-b", 0),
        tenant("bio", 0),
    )
    d = cycle(snapshot([n], t2, run), [job("s", "physics/lab-a", "ann", gpus=1)], NOW)
    assert victims(d) == ["p3"]


def test_stopping_work_is_claimed_by_one_candidate_only():
    # b3 is already stopping; a1 waits for it, a2 needs a fresh victim
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    run[3] = running(run[3].workload, N, [3], since=300, stopping=True)
    d = cycle(snapshot([N], TENANTS, run), [job("a1", gpus=1), job("a2", gpus=1, submit=1)], NOW)
    assert victims(d) == ["b2"]
    assert [p.for_workload for p in d.preemptions] == ["a2"]
    assert d.pending["a1"].reason.startswith("reclaiming its guaranteed share: waiting for 1")


def test_freed_capacity_is_not_taken_by_borrowers_in_the_same_cycle():
    # one GPU is free but a needs 2: b1 is preempted, and the free GPU is kept for a, so
    # lab-c's pending work does not take it
    n = node("n", gpus=4)
    run = [running(job(f"b{i}", "lab-b", "bob", gpus=1), n, [i], since=100 * i) for i in range(3)]
    t = [tenant("lab-a", 2), tenant("lab-b", 1), tenant("lab-c", 0)]
    pending = [job("a", gpus=2), job("c", "lab-c", "carl", gpus=1, submit=1)]
    d = cycle(snapshot([n], t, run), pending, NOW)
    assert victims(d) == ["b2"]
    assert d.admissions == ()
    assert "c" in d.pending


def test_newest_first_across_nodes():
    a, b = node("a", gpus=2), node("b", gpus=2)
    run = [
        running(job("old0", "lab-b", "bob", gpus=1), a, [0], since=100),
        running(job("old1", "lab-b", "bob", gpus=1), a, [1], since=200),
        running(job("new0", "lab-b", "bob", gpus=1), b, [0], since=800),
        running(job("new1", "lab-b", "bob", gpus=1), b, [1], since=900),
    ]
    d = cycle(snapshot([a, b], TENANTS, run), [job("j", gpus=1)], NOW)
    assert victims(d) == ["new1"]


def test_per_model_guarantee_protects_the_victims_model():
    # lab-b: guarantee 4, of which 3 on H100; it holds 3 H100 + 2 A100 = 5, one GPU borrowed.
    # The borrowed GPU is an A100: its H100 work is within its H100 guarantee, so lab-a's
    # H100 request finds no victim; its A100 request does.
    h, a = node("h", gpus=3, model="H100"), node("a", gpus=2, model="A100", gpu_gib=40)
    b = Tenant("lab-b", Quota.gpus(guaranteed=4, by_model={"H100": 3}))
    t = [tenant("lab-a", 2), b]
    run = [
        running(job(f"h{i}", "lab-b", "bob", gpus=1), h, [i], since=100 + i) for i in range(3)
    ] + [running(job(f"a{i}", "lab-b", "bob", gpus=1), a, [i], since=200 + i) for i in range(2)]
    d = cycle(snapshot([h, a], t, run), [job("x", gpus=1, model="H100")], NOW)
    assert d.preemptions == ()
    d = cycle(snapshot([h, a], t, run), [job("x", gpus=1, model="A100")], NOW)
    assert victims(d) == ["a1"]
    # without the per-model guarantee the newest H100 job would go
    t2 = [tenant("lab-a", 2), tenant("lab-b", 4)]
    d = cycle(snapshot([h, a], t2, run), [job("x", gpus=1, model="H100")], NOW)
    assert victims(d) == ["h2"]


def test_a_parent_at_its_limit_does_not_block_reclaim_between_its_children():
    # physics may hold 4 of the 8 GPUs; lab-a (guarantee 1) borrows all 4 of them, so lab-b
    # (guarantee 2) is blocked by physics' limit although GPUs are free: lab-a's newest
    # borrowed work is preempted, and lab-b runs the cycle after.
    big = node("n", gpus=8)
    tenants = [
        tenant("physics", 2, limit=4),
        tenant("physics/lab-a", 1),
        tenant("physics/lab-b", 1),
    ]
    run = [
        running(job(f"a{i}", "physics/lab-a", "ann", gpus=1), big, [i], since=100 * i)
        for i in range(4)
    ]
    snap = snapshot([big], tenants, run)
    pending = [job("b", "physics/lab-b", "bob", gpus=1)]
    d1 = cycle(snap, pending, NOW)
    assert victims(d1) == ["a3"] and d1.admissions == ()
    assert d1.pending["b"].reason.startswith("physics is at its limit of 4 GPUs; reclaiming")
    snap, pending = apply(snap, pending, d1, NOW)
    d2 = cycle(snap, pending, NOW + 1)
    assert [x.workload_id for x in d2.admissions] == ["b"] and d2.preemptions == ()


def test_a_child_over_its_guarantee_is_not_helped_by_reclaim_under_the_parent_limit():
    big = node("n", gpus=8)
    tenants = [tenant("p", 2, limit=4), tenant("p/a", 1), tenant("p/b", 1)]
    run = [running(job(f"b{i}", "p/b", "bob", gpus=1), big, [i], since=100) for i in range(2)]
    run += [running(job(f"a{i}", "p/a", "ann", gpus=1), big, [2 + i], since=100) for i in range(2)]
    # p/b already holds 2 > its guarantee of 1: it must wait, and nobody is preempted
    d = cycle(snapshot([big], tenants, run), [job("b9", "p/b", "bob", gpus=1)], NOW)
    assert d.preemptions == ()
    assert d.pending["b9"].reason.startswith("p is at its limit of 4 GPUs")


@pytest.mark.parametrize(
    ("waited", "after", "reclaims"),
    [
        (0, 600, False),  # a newcomer: completions may fill the shortfall soon
        (599, 600, False),
        (600, 600, True),  # a lasting shortfall
        (0, 0, True),  # reclaim_after_s 0: at once
    ],
)
def test_reclaim_only_after_waiting_reclaim_after_s(waited, after, reclaims):
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(4)])
    cfg = SchedulerConfig(reclaim_after_s=after)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1, submit=NOW - waited)], NOW, cfg)
    assert victims(d) == (["b3"] if reclaims else [])
    if not reclaims:
        assert not d.pending["a"].reason.startswith("reclaiming")


def ckpt_borrowers(*ids_ckpt):
    """lab-b work on N, one GPU each, run since 100: (id, declares checkpointing)."""
    return [
        running(dataclasses.replace(job(i, "lab-b", "bob", gpus=1), checkpointing=c), N, [k], 100)
        for k, (i, c) in enumerate(ids_ckpt)
    ]


def test_borrowed_checkpointing_work_is_reclaimed_at_once():
    # it resumes from its checkpoint, so waiting reclaim_after_s would only leave lab-a short
    run = ckpt_borrowers(("b0", False), ("b1", True), ("b2", False), ("b3", False))
    fresh = [job("a", gpus=1, submit=NOW)]
    d = cycle(snapshot([N], TENANTS, run), fresh, NOW, SchedulerConfig(reclaim_after_s=600))
    assert victims(d) == ["b1"]  # only the checkpointing one, though others lost less
    assert d.pending["a"].reason.startswith("reclaiming its guaranteed share")
    # two GPUs: one checkpointing victim is not enough, so it waits for reclaim_after_s
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=2, submit=NOW)], NOW)
    assert victims(d) == []
    # turned off, every reclaim waits
    off = SchedulerConfig(reclaim_checkpointing_at_once=False)
    assert victims(cycle(snapshot([N], TENANTS, run), fresh, NOW, off)) == []
    # once due, any borrowed work may go (least progress lost first, as before)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1, submit=NOW - 600)], NOW)
    assert len(victims(d)) == 1


def test_borrowed_work_without_checkpointing_still_waits_reclaim_after_s():
    run = ckpt_borrowers(*[(f"b{i}", False) for i in range(4)])
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1, submit=NOW)], NOW)
    assert victims(d) == []
    w = d.pending["a"].wait  # it says when it will reclaim
    assert w is not None and w.kind == "owed" and w.until == NOW + 600


def test_work_already_stopping_is_claimed_before_reclaim_after_s():
    # stopping work costs no new preemption, so a newcomer may count on it at once
    run = borrowers(*[(f"b{i}", 0, 100 * i, True) for i in range(3)]) + [
        running(job("s", "lab-b", "bob", gpus=1), N, [3], since=100, stopping=True)
    ]
    cfg = SchedulerConfig(reclaim_after_s=600)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1, submit=NOW)], NOW, cfg)
    assert d.preemptions == ()
    assert d.pending["a"].reason.startswith("reclaiming")


@pytest.mark.parametrize(
    ("wide_since", "narrow_since", "victim"),
    [
        # 2 GPUs for 200 s (400 GPU-s) vs 1 GPU for 300 s (300 GPU-s): the narrow one loses less
        (NOW - 200, NOW - 300, "narrow"),
        # 2 GPUs for 100 s (200 GPU-s) vs 1 GPU for 300 s: the wide one loses less
        (NOW - 100, NOW - 300, "wide"),
    ],
)
def test_victim_is_the_one_that_loses_least_progress(wide_since, narrow_since, victim):
    n = node("n", gpus=4)
    run = [
        running(job("wide", "lab-b", "bob", gpus=2), n, [0, 1], since=wide_since),
        running(job("narrow", "lab-b", "bob", gpus=1), n, [2], since=narrow_since),
        running(job("own", "lab-a", gpus=1), n, [3], since=0),
    ]
    cfg = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)
    t = [tenant("lab-a", 2), tenant("lab-b", 1)]
    d = cycle(snapshot([n], t, run), [job("a", gpus=1)], NOW, cfg)
    assert victims(d) == [victim]


def test_across_nodes_the_set_that_loses_least_progress_wins():
    n1, n2 = node("n1", gpus=2), node("n2", gpus=2)
    run = [
        running(job("own1", "lab-a", gpus=1), n1, [0], since=0),
        running(job("old", "lab-b", "bob", gpus=1), n1, [1], since=NOW - 1000),
        running(job("own2", "lab-a", gpus=1), n2, [0], since=0),
        running(job("young", "lab-b", "bob", gpus=1), n2, [1], since=NOW - 400),
    ]
    cfg = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)
    t = [tenant("lab-a", 3), tenant("lab-b", 0)]
    d = cycle(snapshot([n1, n2], t, run), [job("a", gpus=1)], NOW, cfg)
    assert victims(d) == ["young"]


@pytest.mark.parametrize(
    ("ahead", "young", "reclaims"),
    [
        ([], False, True),
        # a job ahead within lab-a's guarantee that has waited reclaim_after_s but cannot
        # reclaim (2 GPUs; only b0 has run min_runtime_s) stops the 1-GPU job behind it
        # (what that freed would go to it first)
        ([job("stuck", gpus=2, submit=0)], True, False),
        # ... which alone would reclaim b0
        ([], True, True),
        # a job ahead that has not waited reclaim_after_s yet does not reclaim now, and does
        # not stop work behind it that has (what that reclaims is nominated to it)
        ([job("fresh", gpus=1, priority=5, submit=NOW - 10)], False, True),
        # a 3-GPU job ahead is beyond lab-a's guarantee of 2: it has no claim and would
        # borrow, so it does not stop the 1-GPU job behind it from reclaiming within it
        ([job("big", gpus=3, submit=0)], False, True),
        # a job ahead that reclaims does not stop the one behind it
        ([job("first", gpus=1, submit=0)], False, True),
    ],
)
def test_reclaim_goes_in_queue_order_and_stops_at_blocked_work(ahead, young, reclaims):
    since = [100, NOW - 10, NOW - 10, NOW - 10] if young else [100 * i for i in range(4)]
    run = borrowers(*[(f"b{i}", 0, s, True) for i, s in enumerate(since)])
    pending = [*ahead, job("small", gpus=1, submit=1)]
    cfg = SchedulerConfig(reclaim_after_s=600)
    d = cycle(snapshot([N], TENANTS, run), pending, NOW, cfg)
    assert ("small" in {p.for_workload for p in d.preemptions}) == reclaims


@pytest.mark.parametrize(
    ("a_holds", "nominated", "admitted"),
    [
        # lab-b (holding nothing) ranks first and would take the free GPU ...
        (1, {}, "x"),
        # ... but it was reclaimed for lab-a's c: the node is kept for c
        (1, {"c": ("n1",)}, "c"),
        # a nomination no longer within c's guarantee keeps nothing
        (2, {"c": ("n1",)}, "x"),
    ],
)
def test_nominated_node_is_kept_for_the_workload_it_was_reclaimed_for(a_holds, nominated, admitted):
    n1 = node("n1", gpus=a_holds + 1)
    run = [running(job(f"r{i}", "lab-a", gpus=1), n1, [i], since=0) for i in range(a_holds)]
    t = [tenant("lab-a", 2), tenant("lab-b", 2)]
    pending = [job("x", "lab-b", "bob", gpus=1, submit=0), job("c", gpus=1, submit=5)]
    snap = dataclasses.replace(snapshot([n1], t, run), nominated=nominated)
    d = cycle(snap, pending, NOW)
    assert [a.workload_id for a in d.admissions] == [admitted]
    if admitted == "c":
        assert "lab-a" in d.pending["x"].reason
