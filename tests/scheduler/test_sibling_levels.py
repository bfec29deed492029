"""Service levels taken from siblings, the order inside a level, and reclaim's order among
checkpointing victims (issue 32, goal 6; gpupool.scheduler.levels, .preemption).

Levels are the defaults' absolute ones here (0.5, 5 and 50 GPU-hours: no scale in the
snapshot): a 1-GPU job that has run 3 hours is at level 1, 6 hours at level 2."""

import dataclasses

from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.levels import fine_level, sibling_service
from tests.scheduler.builders import job, node, running, snapshot, tenant

NOW = 100_000.0
H = 3600.0
MILLI_H = 1000.0 * H  # one GPU-hour in milli-GPU-seconds
DEFAULT = SchedulerConfig()
NO_SIBLINGS = dataclasses.replace(DEFAULT, service_levels_siblings_s=0.0)


def ckpt(w):
    return dataclasses.replace(w, checkpointing=True)


def victims(d):
    return sorted(p.workload_id for p in d.preemptions)


def admitted(d):
    return [a.workload_id for a in d.admissions]


def test_the_most_service_of_siblings_within_the_window_by_hand():
    n = node("n", gpus=4)
    run = [
        running(ckpt(job("r1", user="ann", gpus=1, submit=0)), n, [0], since=NOW - H),
        running(ckpt(job("r2", user="ann", gpus=1, submit=500)), n, [1], since=NOW - 2 * H),
        # not checkpointing: says nothing about bob's work
        running(job("r3", user="bob", gpus=1, submit=300), n, [2], since=NOW - 9 * H),
    ]
    attained = {"r1": 0.5 * MILLI_H, "p6": 9 * MILLI_H, "p7": 1 * MILLI_H}
    snap = snapshot([n], [tenant("lab-a", 4)], run, attained=attained)
    pending = [
        ckpt(job("p1", user="ann", gpus=1, submit=300)),  # both siblings: r2's 2 h
        ckpt(job("p2", user="ann", gpus=1, submit=1200)),  # 700 s from r2, 400 from p6
        ckpt(job("p3", user="bob", gpus=1, submit=300)),  # another owner
        ckpt(job("p4", user="ann", gpus=2, submit=300)),  # another request
        job("p5", user="ann", gpus=1, submit=300),  # does not checkpoint
        # requeued with 9 h kept: more than its siblings', and a sibling of p2's
        ckpt(job("p6", user="ann", gpus=1, submit=1600)),
        ckpt(job("p7", user="ann", gpus=1, submit=300)),  # its own 1 h are less
        ckpt(job("p8", user="ann", gpus=1, submit=900)),  # r2 is 400 s away, p6 700 s
    ]
    # r1: 0.5 h kept + 1 h running; r2: 2 h running; p6 (waiting): 9 h kept
    assert sibling_service(snap, pending, NOW, 600.0) == {
        "p1": 2 * MILLI_H,
        "p2": 9 * MILLI_H,
        "p7": 2 * MILLI_H,
        "p8": 2 * MILLI_H,
    }
    assert sibling_service(snap, pending, NOW, 1000.0)["p8"] == 9 * MILLI_H
    # in steps of 0.75 GPU-hours (the cycle's: an eighth of the first level), rounded down
    assert sibling_service(snap, pending, NOW, 600.0, 0.75 * MILLI_H) == {
        "p1": 1.5 * MILLI_H,
        "p2": 9 * MILLI_H,
        "p7": 1.5 * MILLI_H,
        "p8": 1.5 * MILLI_H,
    }
    # within 100 s only p7 (waiting, 1 h kept) is a sibling, of p1
    assert sibling_service(snap, pending, NOW, 100.0) == {"p1": 1 * MILLI_H}


def test_fresh_work_of_a_long_sweep_waits_behind_other_fresh_work():
    n = node("n", gpus=3)
    sweep = [
        running(ckpt(job(f"s{i}", user="ann", gpus=1, submit=0)), n, [i], since=NOW - 3 * H)
        for i in (0, 1)
    ]
    snap = snapshot([n], [tenant("lab-a", 3)], sweep)
    pending = [
        ckpt(job("ann-next", user="ann", gpus=1, submit=100)),
        ckpt(job("bob-first", user="bob", gpus=1, submit=200)),
    ]
    assert admitted(cycle(snap, pending, NOW, NO_SIBLINGS)) == ["ann-next"]
    d = cycle(snap, pending, NOW, DEFAULT)
    assert admitted(d) == ["bob-first"] and victims(d) == []


def test_a_sweep_does_not_preempt_itself_but_others_preempt_it():
    n = node("n", gpus=1)
    long = running(ckpt(job("s0", user="ann", gpus=1, submit=0)), n, [0], since=NOW - 6 * H)
    snap = snapshot([n], [tenant("lab-a", 1)], [long])
    mine = ckpt(job("s1", user="ann", gpus=1, submit=60))
    assert victims(cycle(snap, [mine], NOW, NO_SIBLINGS)) == ["s0"]  # level 0 vs 2
    assert victims(cycle(snap, [mine], NOW, DEFAULT)) == []  # takes s0's level 2
    other = ckpt(job("b0", user="bob", gpus=1, submit=60))
    assert victims(cycle(snap, [other], NOW, DEFAULT)) == ["s0"]


def test_inside_a_level_the_least_served_waiting_work_goes_first():
    n = node("n", gpus=1)
    snap = snapshot([n], [tenant("lab-a", 1)], attained={"x": 0.9 * MILLI_H, "y": 0.6 * MILLI_H})
    # requeued, both at level 1 (0.5 GPU-hours passed); x was submitted first
    pending = [
        ckpt(job("x", user="ann", gpus=1, submit=0)),
        ckpt(job("y", user="bob", gpus=1, submit=10)),
    ]
    assert admitted(cycle(snap, pending, NOW, DEFAULT)) == ["y"]
    coarse = dataclasses.replace(DEFAULT, service_levels_fine_order=False)
    assert admitted(cycle(snap, pending, NOW, coarse)) == ["x"]


def test_fine_level_stays_inside_its_level():
    levels = (1800.0, 18000.0)
    assert fine_level(0.0, levels) == 0.0
    assert 0.0 < fine_level(900_000.0, levels) < fine_level(1_700_000.0, levels) < 1.0
    assert 1.0 <= fine_level(1_800_000.0, levels) < 2.0
    assert fine_level(10**12, levels) == 2.0  # the top level: no order inside


def test_reclaim_takes_checkpointing_work_first_the_most_served_first():
    """lab-b (guaranteed the node) reclaims one GPU from lab-a's borrowed work."""
    n = node("n", gpus=3)
    run = [
        running(job("plain", tenant="lab-a", gpus=1), n, [0], since=NOW - 300),
        running(ckpt(job("young", tenant="lab-a", gpus=1)), n, [1], since=NOW - 600),
        running(ckpt(job("old", tenant="lab-a", gpus=1)), n, [2], since=NOW - 2 * H),
    ]
    snap = snapshot([n], [tenant("lab-a", 0), tenant("lab-b", 3)], run)
    want = [job("b", tenant="lab-b", gpus=1, submit=NOW)]
    cfg = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)
    assert victims(cycle(snap, want, NOW, cfg)) == ["old"]
    by_progress = dataclasses.replace(cfg, reclaim_checkpointing_by_service=False)
    assert victims(cycle(snap, want, NOW, by_progress)) == ["plain"]


def test_a_kept_cache_re_keys_work_whose_service_moved_and_only_that():
    """Cycle 1: the node is full. Cycle 2: y's service passed x's and a GPU is free: a kept
    cache keys y again (x first, as a fresh cycle decides); x, whose service did not move,
    keeps its entry."""
    from gpupool.scheduler.cache import SchedulerCache

    n = node("n", gpus=1)
    busy = running(job("busy", tenant="lab-b", gpus=1), n, [0], since=NOW - 60)
    ts = [tenant("lab-a", 1), tenant("lab-b", 0)]
    pending = [
        ckpt(job("x", user="ann", gpus=1, submit=0)),
        ckpt(job("y", user="bob", gpus=1, submit=10)),
    ]
    cfg = SchedulerConfig(
        min_runtime_s=0, reclaim_after_s=10**9, reclaim_checkpointing_at_once=False
    )
    cache = SchedulerCache()
    snap1 = snapshot([n], ts, [busy], attained={"x": 0.9 * MILLI_H, "y": 0.6 * MILLI_H})
    assert admitted(cycle(snap1, pending, NOW, cfg, cache)) == []
    # the same tenant tree object (a new one would reset the cache's classification)
    snap2 = dataclasses.replace(
        snap1, running=(), attained_service={"x": 0.9 * MILLI_H, "y": 0.95 * MILLI_H}
    )
    d = cycle(snap2, pending, NOW + 2, cfg, cache)
    assert d == cycle(snap2, pending, NOW + 2, cfg)
    assert admitted(d) == ["x"]


def test_a_policy_given_as_text_applies_the_siblings_too():
    """SchedulerConfig.policy may come as the text "fair" (a StrEnum value elsewhere)."""
    n = node("n", gpus=1)
    long = running(ckpt(job("s0", user="ann", gpus=1, submit=0)), n, [0], since=NOW - 6 * H)
    snap = snapshot([n], [tenant("lab-a", 1)], [long])
    mine = ckpt(job("s1", user="ann", gpus=1, submit=60))
    as_text = dataclasses.replace(DEFAULT, policy="fair")
    assert victims(cycle(snap, [mine], NOW, as_text)) == []
