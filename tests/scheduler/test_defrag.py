"""Moves (gpupool.scheduler.defrag): work owed whole GPUs on one node gets them when the free
GPUs are spread over nodes and nothing is borrowed, by moving smaller checkpointing work to
free places on other nodes; nothing else changes."""

import dataclasses

from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.followup import nominations
from tests.scheduler.builders import apply, job, node, placed, running, snapshot, tenant

NOW = 100_000.0
NODES = [node(f"n{i}", gpus=4) for i in range(3)]
# lab-a is owed 4 GPUs; lab-b runs 6 one-GPU jobs, within its guarantee of 8: nothing is
# borrowed, and 2 GPUs are free on each node, so no node has 4
TENANTS = [tenant("lab-a", 4), tenant("lab-b", 8)]
CFG = SchedulerConfig()
OWED = job("big", gpus=4, submit=NOW - 3600)  # waited longer than reclaim_after_s


def ckpt(w):
    return dataclasses.replace(w, checkpointing=True)


def spread(checkpointing=True, since=NOW - 7200, gpus=1):
    run = []
    for i, n in enumerate(NODES):
        for k in range(2):
            w = job(f"b{i}{k}", "lab-b", "bob", gpus=gpus, submit=0)
            run.append(running(ckpt(w) if checkpointing else w, n, [k], since=since))
    return run


def test_owed_work_moves_smaller_checkpointing_work_off_one_node():
    snap = snapshot(NODES, TENANTS, spread())
    d = cycle(snap, [OWED], NOW, CFG)
    assert d.admissions == ()
    moved = {p.workload_id: p.move_to for p in d.preemptions}
    assert len(moved) == 2
    assert all(p.for_workload == "big" for p in d.preemptions)
    node_of = {rw.workload.id: rw.allocation.node for rw in snap.running}
    (source,) = {node_of[w] for w in moved}  # both from one node
    assert all(to is not None and to != source for to in moved.values())
    assert all("moved to" in p.reason and "resumes" in p.reason for p in d.preemptions)
    assert "spread over nodes" in d.pending["big"].reason
    assert "2 smaller checkpointing workloads moved" in d.pending["big"].reason
    # the candidate is nominated to the source node, each moved workload to where it goes
    nominated = nominations(d.preemptions, node_of)
    assert nominated["big"] == (source,)
    assert {w: nominated[w] for w in moved} == {w: (to,) for w, to in moved.items()}


def test_after_the_move_everyone_runs_where_it_was_promised():
    snap = snapshot(NODES, TENANTS, spread())
    d = cycle(snap, [OWED], NOW, CFG)
    node_of = {rw.workload.id: rw.allocation.node for rw in snap.running}
    nominated = nominations(d.preemptions, node_of)
    snap2, pending = apply(snap, [OWED], d, NOW)
    snap2 = dataclasses.replace(snap2, nominated=nominated)
    d2 = cycle(snap2, pending, NOW + 60, CFG)
    got = placed(d2)
    assert set(got) == {"big", *(p.workload_id for p in d.preemptions)}
    assert got["big"][0] == nominated["big"][0]
    assert len(got["big"][1]) == 4
    for p in d.preemptions:
        assert got[p.workload_id][0] == p.move_to
    assert d2.preemptions == ()


def test_no_move_without_checkpointing_or_before_min_runtime():
    for run in (spread(checkpointing=False), spread(since=NOW - 100)):
        d = cycle(snapshot(NODES, TENANTS, run), [OWED], NOW, CFG)
        assert d.preemptions == ()
        assert d.admissions == ()


def test_moves_for_owed_work_only_and_not_due_only_with_early_reclaim():
    snap = snapshot(NODES, TENANTS, spread())
    beyond = job("beyond", gpus=4, submit=NOW - 3600)
    lean = snapshot(NODES, [tenant("lab-a", 3), tenant("lab-b", 9)], spread())
    assert cycle(lean, [beyond], NOW, CFG).preemptions == ()  # 4 > its guarantee of 3
    fresh = job("fresh", gpus=4, submit=NOW - 60)  # has not waited reclaim_after_s
    # moved work loses no progress, so work owed GPUs need not wait reclaim_after_s...
    assert len(cycle(snap, [fresh], NOW, CFG).preemptions) == 2
    # ...unless early reclaim of checkpointing work is turned off
    wait = dataclasses.replace(CFG, reclaim_checkpointing_at_once=False)
    assert cycle(snap, [fresh], NOW, wait).preemptions == ()
    off = dataclasses.replace(CFG, defrag_moves=False)
    assert cycle(snap, [OWED], NOW, off).preemptions == ()


def test_no_move_when_the_moved_work_has_nowhere_to_go():
    # every GPU is busy with lab-b's work, within its guarantee: a move would only stop work
    tight = [node(f"n{i}", gpus=3) for i in range(3)]
    run = []
    for i, n in enumerate(tight):
        for k in range(3):
            w = ckpt(job(f"b{i}{k}", "lab-b", "bob", gpus=1, submit=0))
            run.append(running(w, n, [k], since=NOW - 7200))
    snap = snapshot(tight, [tenant("lab-a", 3), tenant("lab-b", 9)], run)
    d = cycle(snap, [job("big", gpus=3, submit=NOW - 3600)], NOW, CFG)
    assert d.preemptions == ()


def test_work_as_big_as_the_candidate_is_not_moved_even_where_it_would_help():
    # n0: lab-b's 2-GPU job and 1 free GPU; n1: 2 free GPUs but few free CPUs, so the
    # candidate (2 GPUs, 32 CPUs) cannot go there and the 2-GPU job (1 CPU) could. Moving
    # it would make room, but it is as big as the candidate: the bound keeps it
    two = [node("n0", gpus=3), node("n1", gpus=3)]
    run = [
        running(ckpt(job("c0", "lab-b", "bob", gpus=2, submit=0)), two[0], [0, 1], since=0),
        running(job("cpu", "lab-b", "bob", gpus=1, cpus=60, submit=0), two[1], [0], since=0),
    ]
    tenants = [tenant("lab-a", 2), tenant("lab-b", 4)]
    cand = job("two", gpus=2, cpus=32, submit=NOW - 3600)
    d = cycle(snapshot(two, tenants, run), [cand], NOW, CFG)
    assert d.preemptions == ()
    # the same with a 1-GPU job beside 1 free GPU on n0: that one is moved, to n1
    run[0] = running(ckpt(job("b0", "lab-b", "bob", gpus=1, submit=0)), two[0], [0], since=0)
    run.append(running(job("c1", "lab-b", "bob", gpus=1, submit=0), two[0], [1], since=0))
    d = cycle(snapshot(two, tenants, run), [cand], NOW, CFG)
    assert [(p.workload_id, p.move_to) for p in d.preemptions] == [("b0", "n1")]
