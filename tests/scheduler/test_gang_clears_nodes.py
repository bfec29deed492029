"""A gang within its tenant's guarantee that reclaim cannot place stops checkpointing work on
the N nodes that need the fewest victims (`gang_clears_nodes`, gpupool.scheduler.gangreclaim):
its own tenant's, or that of tenants above their guarantee; all N nodes or none."""

from __future__ import annotations

import dataclasses

from gpupool.domain import Workload
from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.cache import SchedulerCache
from tests.scheduler.builders import apply, job, nodes, running, snapshot, tenant

ON = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0, gang_clears_nodes=True)
OFF = dataclasses.replace(ON, gang_clears_nodes=False)


def gang(id: str, n: int, per: int, tenant: str = "lab-a", submit: float = 0) -> Workload:
    w = job(id, tenant=tenant, gpus=n * per, submit=submit)
    return dataclasses.replace(w, request=dataclasses.replace(w.request, nodes=n))


def ckpt(w: Workload, on: bool = True) -> Workload:
    return dataclasses.replace(w, checkpointing=on)


def _cluster(c_guarantee: int = 0, c1_checkpoints: bool = True, a0_since: float = -3600.0):
    """Three 8-GPU nodes: n-0 and n-1 each run 4 GPUs of lab-a (the gang's tenant) and 4 of
    lab-c, all checkpointing; n-2 runs 8 GPUs of lab-b that may not be preempted. lab-a is
    guaranteed 24 GPUs, so its 2 x 8 gang is within its guarantee; reclaim alone (other
    tenants' borrowed work) frees no whole node."""
    n = nodes("n", 3)
    ts = [tenant("lab-a", 24), tenant("lab-b", 0), tenant("lab-c", c_guarantee)]
    run = [
        running(ckpt(job("a0", tenant="lab-a", gpus=4)), n[0], range(4), since=a0_since),
        running(ckpt(job("c0", tenant="lab-c", gpus=4)), n[0], range(4, 8), since=-3600),
        running(ckpt(job("a1", tenant="lab-a", gpus=4)), n[1], range(4), since=-3600),
        running(
            ckpt(job("c1", tenant="lab-c", gpus=4), c1_checkpoints), n[1], range(4, 8), since=-3600
        ),
        running(job("b2", tenant="lab-b", gpus=8, preemptible=False), n[2], range(8), since=-3600),
    ]
    return snapshot(n, ts, run)


def test_the_gang_clears_two_nodes_and_starts_there_next_cycle():
    snap = _cluster()
    g = gang("g", 2, 8)
    assert cycle(snap, [g], 0.0, OFF).preemptions == ()  # reclaim finds no whole node
    d = cycle(snap, [g], 0.0, ON)
    assert sorted(p.workload_id for p in d.preemptions) == ["a0", "a1", "c0", "c1"]
    assert {p.for_workload for p in d.preemptions} == {"g"}
    assert "resumes from its checkpoint" in d.preemptions[0].reason
    assert "on 2 nodes held for it" in d.pending["g"].reason
    snap2, pending = apply(snap, [g], d, 0.0)
    d2 = cycle(snap2, pending, 1.0, ON)
    assert d2.admissions[0].workload_id == "g"
    assert sorted(d2.admissions[0].allocation.nodes) == ["n-0", "n-1"]


def test_only_as_many_victims_as_needed_least_progress_first():
    # a 2 x 4 gang needs 4 GPUs on each node; lab-c (guaranteed 4) may lose only one of its
    # two, so reclaim frees one node of two: the rule stops one workload per node, on n-0
    # a0 (run a minute) rather than c0 (an hour) when victims go by least progress
    snap = _cluster(c_guarantee=4, a0_since=-60.0)
    g = gang("g", 2, 4)
    by_progress = dataclasses.replace(ON, reclaim_checkpointing_by_service=False)
    assert cycle(snap, [g], 0.0, OFF).preemptions == ()
    d = cycle(snap, [g], 0.0, by_progress)
    victims = {p.workload_id for p in d.preemptions}
    assert len(victims) == 2 and "a0" in victims and victims & {"a1", "c1"}


def test_checkpointing_victims_by_most_service_by_default():
    # the same, with the default order for checkpointing victims (a restart loses only the
    # checkpoint): on n-0 c0 (an hour of service) rather than a0 (a minute)
    snap = _cluster(c_guarantee=4, a0_since=-60.0)
    d = cycle(snap, [gang("g", 2, 4)], 0.0, ON)
    victims = {p.workload_id for p in d.preemptions}
    assert len(victims) == 2 and "c0" in victims and "a0" not in victims


def test_nothing_is_stopped_when_the_gang_cannot_be_completed():
    g = gang("g", 2, 8)
    # c1 does not checkpoint: only n-0 could be cleared (n-2's work is not preemptible)
    assert cycle(_cluster(c1_checkpoints=False), [g], 0.0, ON).preemptions == ()
    # lab-c is within its guarantee (8 GPUs): its work is not stopped, so no node clears
    assert cycle(_cluster(c_guarantee=8), [g], 0.0, ON).preemptions == ()
    # lab-c guaranteed 4: one of its two workloads may go, which clears one node of two
    assert cycle(_cluster(c_guarantee=4), [g], 0.0, ON).preemptions == ()


def test_a_gang_beyond_its_guarantee_or_not_due_stops_nothing():
    snap = _cluster()
    assert cycle(snap, [gang("g", 3, 8)], 0.0, ON).preemptions == ()  # 8 + 24 > 24
    late = dataclasses.replace(ON, reclaim_after_s=600)
    g = gang("g", 2, 8)
    assert cycle(snap, [g], 300.0, late).preemptions == ()
    assert len(cycle(snap, [g], 600.0, late).preemptions) == 4
    # everything has run an hour: past gang_clears_min_runtime_s (60 s), which is what counts
    # when it is below min_runtime_s; not past 2 hours
    longer = dataclasses.replace(ON, min_runtime_s=7200)
    assert len(cycle(snap, [g], 0.0, longer).preemptions) == 4
    young = dataclasses.replace(longer, gang_clears_min_runtime_s=7200)
    assert cycle(snap, [g], 0.0, young).preemptions == ()


def test_work_of_higher_priority_is_not_stopped():
    snap = _cluster()
    run = [
        dataclasses.replace(rw, workload=dataclasses.replace(rw.workload, priority=1))
        if rw.workload.id == "a1"
        else rw
        for rw in snap.running
    ]
    snap = dataclasses.replace(snap, running=tuple(run))
    assert cycle(snap, [gang("g", 2, 8)], 0.0, ON).preemptions == ()


def test_decisions_are_deterministic_and_the_same_with_a_kept_cache():
    snap = _cluster()
    pending = [gang("g", 2, 8), ckpt(job("x", tenant="lab-c", gpus=1, submit=5))]
    cache = SchedulerCache()
    now = 0.0
    for _ in range(3):
        fresh = cycle(snap, pending, now, ON)
        assert cycle(snap, pending, now, ON) == fresh
        assert cycle(snap, pending, now, ON, cache) == fresh
        snap, pending = apply(snap, pending, fresh, now)
        now += 1.0
    assert any(rw.workload.id == "g" for rw in snap.running)
