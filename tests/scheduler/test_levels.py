"""Service levels inside a tenant (gpupool.scheduler.levels): short work does not wait
behind the tenant's own long-running checkpointing work, and nothing else moves."""

import dataclasses

from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.levels import level_of
from tests.scheduler.builders import job, node, running, snapshot, tenant

NOW = 100_000.0
N = node("n", gpus=2)
TENANTS = [tenant("lab-a", 1), tenant("lab-b", 1)]
# levels of 1 and 10 GPU-hours; any higher level may be preempted (the default is 2 apart)
CFG = SchedulerConfig(service_levels_s=(3600.0, 36000.0), preempt_levels_apart=1)


def ckpt(w):
    return dataclasses.replace(w, checkpointing=True)


def victims(d):
    return sorted(p.workload_id for p in d.preemptions)


def test_levels_count_thresholds_passed_in_gpu_seconds():
    assert level_of(0, (3600.0, 36000.0)) == 0
    assert level_of(3599_000, (3600.0, 36000.0)) == 0
    assert level_of(3600_000, (3600.0, 36000.0)) == 1
    assert level_of(10**9, (3600.0, 36000.0)) == 2


def test_new_work_preempts_its_own_tenants_long_running_checkpointing_work():
    # lab-a runs two 1-GPU jobs for 2 h (level 1); a new lab-a job takes one of their places
    run = [
        running(ckpt(job("long1", gpus=1)), N, [0], since=NOW - 7200),
        running(ckpt(job("long2", gpus=1)), N, [1], since=NOW - 3 * 3600),
    ]
    d = cycle(snapshot([N], TENANTS, run), [job("short", gpus=1, submit=NOW)], NOW, CFG)
    assert victims(d) == ["long2"]  # the most attained service goes first
    assert d.preemptions[0].for_workload == "short"
    assert "resumes from its checkpoint" in d.preemptions[0].reason
    assert "own checkpointing workloads" in d.pending["short"].reason


def test_work_without_checkpointing_is_never_preempted_for_levels():
    run = [running(job("long", gpus=2), N, [0, 1], since=NOW - 7200)]
    d = cycle(snapshot([N], TENANTS, run), [job("short", gpus=1, submit=NOW)], NOW, CFG)
    assert victims(d) == []


def test_other_tenants_work_is_not_preempted_for_levels():
    run = [running(ckpt(job("b-long", "lab-b", "bob", gpus=2)), N, [0, 1], since=NOW - 7200)]
    # lab-a is within its guarantee, so it may reclaim lab-b's borrowed GPU (an ordinary
    # reclaim: one GPU, the borrowed one), never more for service levels
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=1, submit=NOW - 900)], NOW, CFG)
    assert all("reclaims its guaranteed share" in p.reason for p in d.preemptions)
    d = cycle(snapshot([N], TENANTS, run), [job("a", gpus=2, submit=NOW - 900)], NOW, CFG)
    assert victims(d) == []  # 2 GPUs are beyond lab-a's guarantee: no reclaim either


def test_victims_at_the_same_level_or_young_or_higher_priority_are_kept():
    same = [running(ckpt(job("young", gpus=2)), N, [0, 1], since=NOW - 100)]
    d = cycle(snapshot([N], TENANTS, same), [job("short", gpus=1, submit=NOW)], NOW, CFG)
    assert victims(d) == []  # level 0 like the candidate (and younger than min_runtime_s)
    vip = [running(ckpt(job("vip", gpus=2, priority=5)), N, [0, 1], since=NOW - 7200)]
    d = cycle(snapshot([N], TENANTS, vip), [job("short", gpus=1, submit=NOW)], NOW, CFG)
    assert victims(d) == []
    # a requeued workload keeps its service: at level 1 it preempts nothing at level 1
    run = [running(ckpt(job("long", gpus=2)), N, [0, 1], since=NOW - 7200)]
    back = ckpt(job("back", gpus=1, submit=0))
    snap = snapshot([N], TENANTS, run, attained={"back": 5000 * 1000.0})
    assert victims(cycle(snap, [back], NOW, CFG)) == []


def test_requeued_work_with_attained_service_waits_behind_fresh_work_of_its_tenant():
    free = node("f", gpus=1)
    old = ckpt(job("old", gpus=1, submit=0))
    new = job("new", gpus=1, submit=50)
    snap = snapshot([free], TENANTS, [], attained={"old": 4000 * 1000.0})
    d = cycle(snap, [old, new], NOW, CFG)
    assert [a.workload_id for a in d.admissions] == ["new"]
    assert SchedulerConfig().service_levels_s == (1800.0, 18000.0, 180000.0)  # default: on
    off = SchedulerConfig(service_levels_s=())
    d = cycle(snap, [old, new], NOW, off)
    assert [a.workload_id for a in d.admissions] == ["old"]  # submit order without levels


def test_without_levels_nothing_is_preempted_within_a_tenant():
    run = [running(ckpt(job("long", gpus=2)), N, [0, 1], since=NOW - 7200)]
    off = dataclasses.replace(CFG, service_levels_s=())
    d = cycle(snapshot([N], TENANTS, run), [job("short", gpus=1, submit=NOW)], NOW, off)
    assert victims(d) == []


def test_a_tenant_below_its_guarantee_reclaims_borrowed_work_before_stopping_its_own():
    # lab-a (guaranteed 2 of 4) runs one long checkpointing job; lab-b borrows the rest.
    n4 = node("n", gpus=4)
    tenants = [tenant("lab-a", 2), tenant("lab-b", 2)]
    run = [
        running(ckpt(job("a-long", gpus=1)), n4, [0], since=NOW - 7200),
        *[
            running(job(f"b{i}", "lab-b", "bob", gpus=1), n4, [i], since=NOW - 7200)
            for i in (1, 2, 3)
        ],
    ]
    snap = snapshot([n4], tenants, run)
    # due: lab-a takes its guarantee back from lab-b, its own job keeps running
    d = cycle(snap, [job("short", gpus=1, submit=NOW - 900)], NOW, CFG)
    assert len(victims(d)) == 1 and victims(d)[0].startswith("b")
    assert "reclaims its guaranteed share" in d.preemptions[0].reason
    # not yet due: it waits for the reclaim rather than stopping its own work (which would
    # leave lab-a below its guarantee while lab-b borrows)
    d = cycle(snap, [job("short", gpus=1, submit=NOW - 60)], NOW, CFG)
    assert victims(d) == []
    # at its guarantee, the same job makes room among lab-a's own work instead
    at = [*run[:1], running(ckpt(job("a-long2", gpus=1)), n4, [1], since=NOW - 9000), *run[2:]]
    d = cycle(snapshot([n4], tenants, at), [job("short", gpus=1, submit=NOW - 900)], NOW, CFG)
    assert victims(d) == ["a-long2"]


def test_by_default_only_work_two_levels_up_is_preempted():
    """Defaults: levels at 0.5, 5 and 50 GPU-hours, victims 2 or more levels above (each
    job at its own level: the siblings' level is test_sibling_levels.py's)."""
    cfg = SchedulerConfig(service_levels_siblings_s=0.0)
    assert cfg.preempt_levels_apart == 2
    fresh = [job("short", gpus=1, submit=NOW)]
    # 3 GPU-hours each: level 1, one level above the fresh job: kept
    mid = [running(ckpt(job(f"mid{i}", gpus=1)), N, [i], since=NOW - 3 * 3600) for i in (0, 1)]
    assert victims(cycle(snapshot([N], TENANTS, mid), fresh, NOW, cfg)) == []
    # one of them has run 6 GPU-hours: level 2, two above: it makes room
    long = [mid[0], running(ckpt(job("long", gpus=1)), N, [1], since=NOW - 6 * 3600)]
    d = cycle(snapshot([N], TENANTS, long), fresh, NOW, cfg)
    assert victims(d) == ["long"]
    # a requeued job at level 1 (1 GPU-hour kept) needs level 3 (50 GPU-hours) to preempt
    back = ckpt(job("back", gpus=1, submit=0))
    snap = snapshot([N], TENANTS, long, attained={"back": 3600 * 1000.0})
    assert victims(cycle(snap, [back], NOW, cfg)) == []
    huge = [mid[0], running(ckpt(job("huge", gpus=1)), N, [1], since=NOW - 60 * 3600)]
    snap = snapshot([N], TENANTS, huge, attained={"back": 3600 * 1000.0})
    assert victims(cycle(snap, [back], NOW, cfg)) == ["huge"]


def test_a_running_gang_is_never_stopped_for_levels():
    # lab-a's 2 x 2 gang has run for hours (level 2); lab-a's new 1-GPU job waits for it
    # rather than stop it (a gang stopped must find N whole nodes again)
    n2 = [node("n1", gpus=2), node("n2", gpus=2)]
    g = ckpt(job("gang", gpus=4))
    g = dataclasses.replace(g, request=dataclasses.replace(g.request, nodes=2))
    shares = [
        *running(g, n2[0], [0, 1]).allocation.shares,
        *running(g, n2[1], [0, 1]).allocation.shares,
    ]
    alloc = dataclasses.replace(
        running(g, n2[0], [0, 1], since=NOW - 7200).allocation, shares=tuple(shares)
    )
    run = [dataclasses.replace(running(g, n2[0], [0, 1], since=NOW - 7200), allocation=alloc)]
    snap = snapshot(n2, [tenant("lab-a", 4)], run)
    d = cycle(snap, [job("short", gpus=1, submit=NOW)], NOW, CFG)
    assert victims(d) == []
    # the same work on one node is stopped for it (the rule the gang is exempt from)
    one = [running(ckpt(job("long", gpus=2)), n2[0], [0, 1], since=NOW - 7200)]
    full = [running(ckpt(job("long2", gpus=2)), n2[1], [0, 1], since=NOW - 7200)]
    d = cycle(snapshot(n2, [tenant("lab-a", 4)], one + full), [job("short", gpus=1)], NOW, CFG)
    assert victims(d) != []
