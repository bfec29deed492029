"""Nodes held for a gang do not sit idle while they drain (`gang_hold_backfill`): borrowed
checkpointing work may run on them and gives them back once the gang fits without it."""

from __future__ import annotations

import dataclasses

from gpupool.domain import Workload
from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.followup import nominations
from tests.scheduler.builders import apply, job, nodes, running, snapshot, tenant

FAIR = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)
OFF = dataclasses.replace(FAIR, gang_hold_backfill=False)


def gang(id: str, n: int, per: int, tenant: str = "lab-a", submit: float = 0) -> Workload:
    w = job(id, tenant=tenant, gpus=n * per, submit=submit)
    return dataclasses.replace(w, request=dataclasses.replace(w.request, nodes=n))


def ckpt(w: Workload) -> Workload:
    return dataclasses.replace(w, checkpointing=True)


def _half_busy(n):
    """Each node runs 4 GPUs of lab-b work that may not be preempted."""
    return [
        running(job(f"r{i}", tenant="lab-b", gpus=4, preemptible=False), n[i], range(4))
        for i in range(2)
    ]


def test_borrowed_checkpointing_work_backfills_held_nodes_and_other_work_does_not():
    n = nodes("n", 2)
    snap = snapshot(n, [tenant("lab-a", 16), tenant("lab-b", 0)], _half_busy(n))
    pend = [
        gang("g", 2, 8),
        job("plain", tenant="lab-b", gpus=2, submit=1),
        ckpt(job("resumable", tenant="lab-b", gpus=2, submit=2)),
    ]
    d = cycle(snap, pend, 0.0, FAIR)
    assert [a.workload_id for a in d.admissions] == ["resumable"]
    assert "held for it" in d.pending["g"].reason
    assert "g" in d.pending["plain"].reason  # behind the gang, as before
    # off: held nodes drain, as before
    d = cycle(snap, pend, 0.0, OFF)
    assert d.admissions == ()


def test_guaranteed_checkpointing_work_does_not_backfill_a_guaranteed_gangs_hold():
    # lab-c is within its guarantee: it could never be made to give the node back
    n = nodes("n", 2)
    ts = [tenant("lab-a", 16), tenant("lab-b", 0), tenant("lab-c", 4)]
    snap = snapshot(n, ts, _half_busy(n))
    d = cycle(snap, [gang("g", 2, 8), ckpt(job("c", tenant="lab-c", gpus=2, submit=1))], 0.0, FAIR)
    assert d.admissions == ()


def _borrowed_on_both(n, since: float = -3600.0, **kw):
    return [
        running(ckpt(job(f"b{i}", tenant="lab-b", gpus=4, **kw)), n[i], range(4), since=since)
        for i in range(2)
    ]


def test_a_held_gang_stops_borrowed_checkpointing_work_on_its_nodes_then_starts():
    # lab-a's gang borrows (guarantee 0), so it may not reclaim; lab-b's checkpointing work on
    # the held nodes borrows too: once the gang has waited reclaim_after_s, it gives them back
    n = nodes("n", 2)
    run = _borrowed_on_both(n)
    snap = snapshot(n, [tenant("lab-a", 0), tenant("lab-b", 0)], run)
    g = gang("g", 2, 8)
    config = dataclasses.replace(FAIR, reclaim_after_s=600)
    d = cycle(snap, [g], 300.0, config)
    assert d.preemptions == ()  # not waited long enough yet
    d = cycle(snap, [g], 600.0, config)
    assert sorted(p.workload_id for p in d.preemptions) == ["b0", "b1"]
    assert {p.for_workload for p in d.preemptions} == {"g"}
    assert "held for g of lab-a" in d.preemptions[0].reason
    assert "resumes from its checkpoint" in d.preemptions[0].reason
    assert "stopping 2 borrowed checkpointing workloads" in d.pending["g"].reason
    node_of = {rw.workload.id: rw.allocation.node for rw in run}
    snap2, pending = apply(snap, [g], d, 600.0)
    snap2 = dataclasses.replace(snap2, nominated=nominations(d.preemptions, node_of))
    d2 = cycle(snap2, pending, 601.0, config)
    assert [a.workload_id for a in d2.admissions][:1] == ["g"]
    assert sorted(d2.admissions[0].allocation.nodes) == ["n-0", "n-1"]
    # off: nothing is stopped, the gang waits for the nodes to drain
    off = dataclasses.replace(config, gang_hold_backfill=False)
    assert cycle(snap, [g], 600.0, off).preemptions == ()


def test_work_within_a_guarantee_is_never_given_back_and_it_is_all_or_nothing():
    n = nodes("n", 2)
    g = gang("g", 2, 8)
    # lab-b holds 8 GPUs: with a guarantee of 8 none is borrowed; with 4, only one of the two
    # could be taken, which frees one node of two: nothing is stopped
    for guarantee in (8, 4):
        snap = snapshot(n, [tenant("lab-a", 0), tenant("lab-b", guarantee)], _borrowed_on_both(n))
        d = cycle(snap, [g], 0.0, FAIR)
        assert d.preemptions == (), guarantee
        assert "held for it" in d.pending["g"].reason
    # with no guarantee both are borrowed
    snap = snapshot(n, [tenant("lab-a", 0), tenant("lab-b", 0)], _borrowed_on_both(n))
    assert len(cycle(snap, [g], 0.0, FAIR).preemptions) == 2


def test_work_without_checkpointing_or_not_past_min_runtime_is_not_given_back():
    n = nodes("n", 2)
    ts = [tenant("lab-a", 0), tenant("lab-b", 0)]
    g = gang("g", 2, 8)
    plain = [
        running(job(f"b{i}", tenant="lab-b", gpus=4), n[i], range(4), since=-3600) for i in (0, 1)
    ]
    assert cycle(snapshot(n, ts, plain), [g], 0.0, FAIR).preemptions == ()
    young = _borrowed_on_both(n, since=-10.0)
    config = dataclasses.replace(FAIR, min_runtime_s=300)
    assert cycle(snapshot(n, ts, young), [g], 0.0, config).preemptions == ()
    assert len(cycle(snapshot(n, ts, young), [g], 290.0, config).preemptions) == 2
