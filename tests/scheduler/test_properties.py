"""Property tests on random scenarios, over several cycles with decisions applied.

Invariants: no GPU over-allocated in milli or memory (nor a node in CPUs or memory); placements
obey the request; no tenant over its limit and no user over a per-user cap (fair); only
preemptible, old-enough, borrowing work of other tenants is preempted; every pending workload is
admitted, pending or unschedulable exactly once; same input -> same decisions; a tenant below
its guarantee is not kept waiting while others borrow for more than one cycle.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain import MILLI_PER_GPU, SharingMode
from gpupool.scheduler import Decisions, Policy, SchedulerConfig, Snapshot, cycle
from tests.scheduler.builders import apply, job, node, snapshot, tenant, tree

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw, one_gpu_jobs: bool = False, quotas: bool = True):
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        nodes.append(
            node(
                f"n{i}",
                gpus=draw(st.integers(1, 4)),
                model="A100" if one_gpu_jobs else draw(st.sampled_from(["A100", "H100"])),
                gpu_gib=draw(st.sampled_from([40, 80])),
                cpus=draw(st.integers(2, 16)) if not one_gpu_jobs else 64,
                memory_gib=256,
                sharing="exclusive"
                if one_gpu_jobs
                else draw(st.sampled_from(["exclusive", "shared"])),
                state="ready" if one_gpu_jobs else draw(st.sampled_from(["ready"] * 5 + ["down"])),
            )
        )
    total = sum(len(n.gpus) for n in nodes)
    nested = draw(st.booleans()) and not one_gpu_jobs
    names = [f"p/t{i}" if nested and i < 2 else f"t{i}" for i in range(draw(st.integers(2, 4)))]
    left = total
    tenants = []
    for name in names:
        g = draw(st.integers(0, left))
        left -= g
        limit = None
        per_user = None
        if quotas and draw(st.booleans()):
            limit = g + draw(st.integers(0, total))
        if quotas and draw(st.booleans()):
            per_user = draw(st.sampled_from([0.5, 1, 2, 3]))
        tenants.append(tenant(name, g, limit, draw(st.integers(1, 3)), per_user))
    if nested:
        tenants.append(tenant("p", 0))
    workloads = []
    for i in range(draw(st.integers(1, 12))):
        kind = "whole" if one_gpu_jobs else draw(st.sampled_from(["whole", "whole", "frac", "cpu"]))
        kw: dict = {
            "tenant": draw(st.sampled_from(names)),
            "user": draw(st.sampled_from(["ann", "bob"])),
            "priority": draw(st.integers(0, 2)),
            "preemptible": draw(st.booleans()),
            "submit": draw(st.sampled_from([0, 0, 50, 150, 250, 350])),
            "cpus": 1,
            "memory_gib": 4,
        }
        if kind == "whole":
            kw["gpus"] = 1 if one_gpu_jobs else draw(st.integers(1, 3))
            if not one_gpu_jobs:
                kw["model"] = draw(st.sampled_from([None, None, "A100", "H100"]))
        elif kind == "frac":
            kw["fraction"] = draw(st.sampled_from([0.25, 0.5, 0.75]))
            kw["gpu_gib"] = draw(st.sampled_from([0, 5, 30]))
        workloads.append(job(f"w{i}", **kw))
    return snapshot(nodes, tree(*tenants)), workloads


# -- invariant checks ------------------------------------------------------------------------


def check_decisions(snap: Snapshot, pending, d: Decisions, now: float, config: SchedulerConfig):
    nodes = {n.name: n for n in snap.nodes}
    by_id = {w.id: w for w in pending}
    running = {rw.workload.id: rw for rw in snap.running}
    # every pending workload exactly once
    admitted = [a.workload_id for a in d.admissions]
    assert len(admitted) == len(set(admitted))
    groups = [set(admitted), set(d.pending), set(d.unschedulable)]
    assert set().union(*groups) == set(by_id)
    assert sum(len(g) for g in groups) == len(by_id)
    # capacity: running (victims included: they still hold their GPUs) + admissions
    milli: dict[tuple[str, int], int] = {}
    mem: dict[tuple[str, int], int] = {}
    cpu: dict[str, int] = {}
    ram: dict[str, int] = {}
    allocs = [rw.allocation for rw in snap.running] + [a.allocation for a in d.admissions]
    for a in allocs:
        cpu[a.node] = cpu.get(a.node, 0) + a.cpu_milli
        ram[a.node] = ram.get(a.node, 0) + a.memory_mib
        for s in a.shares:
            k = (s.node, s.gpu_index)
            milli[k] = milli.get(k, 0) + s.milli
            total = nodes[s.node].gpu(s.gpu_index).memory_mib
            mem[k] = mem.get(k, 0) + (total if s.milli == MILLI_PER_GPU else s.memory_mib)
    for (n, i), m in milli.items():
        assert m <= MILLI_PER_GPU, f"GPU {n}/{i} over-allocated: {m} milli"
        assert mem[(n, i)] <= nodes[n].gpu(i).memory_mib, f"GPU {n}/{i} memory over-allocated"
    for n, c in cpu.items():
        assert c <= nodes[n].cpu_milli and ram[n] <= nodes[n].memory_mib
    # each admission matches its request
    whole_only = config.policy is Policy.FIFO
    for a in d.admissions:
        w = by_id[a.workload_id]
        r = w.request
        nd = nodes[a.allocation.node]
        assert nd.schedulable
        assert a.allocation.cpu_milli == r.cpu_milli and a.allocation.memory_mib == r.memory_mib
        gpus = [nd.gpu(s.gpu_index) for s in a.allocation.shares]
        assert all(g.schedulable for g in gpus)
        if r.gpu_model:
            assert all(g.model == r.gpu_model for g in gpus)
        if r.gpus or (r.gpu_milli and whole_only):
            assert len(gpus) == max(r.gpus, 1) and all(s.whole for s in a.allocation.shares)
            assert len({g.model for g in gpus}) == 1
        elif r.gpu_milli:
            (s,) = a.allocation.shares
            assert s.milli == r.gpu_milli and gpus[0].sharing is SharingMode.SHARED
        else:
            assert a.allocation.shares == ()
    # limits and per-user caps (fair only)
    if config.policy is Policy.FAIR:
        use: dict[str, int] = {}
        per_user: dict[tuple[str, str], int] = {}
        owners = {rw.workload.id: rw.workload for rw in snap.running} | by_id
        for a in allocs:
            w = owners[a.workload_id]
            for t in snap.tenants.ancestors(w.tenant):
                use[t] = use.get(t, 0) + a.gpu_milli
                per_user[(t, w.owner)] = per_user.get((t, w.owner), 0) + a.gpu_milli
        for t in snap.tenants:
            if t.quota.limit_milli is not None:
                assert use.get(t.name, 0) <= t.quota.limit_milli, f"{t.name} over its limit"
            cap = t.quota.max_milli_per_user
            if cap is not None:
                for (tn, _u), m in per_user.items():
                    if tn == t.name:
                        assert m <= cap
    # preemption rules
    if d.preemptions:
        assert config.policy is Policy.FAIR and config.preemption
    for p in d.preemptions:
        v = running[p.workload_id]
        assert v.workload.preemptible, "non-preemptible work was preempted"
        assert not v.stopping
        assert now - v.allocation.since >= config.min_runtime_s
        assert v.workload.tenant != by_id[p.for_workload].tenant
        assert p.for_workload in d.pending


def run_cycles(snap, workloads, config, finishes, step=100.0):
    """Cycles at 0, step, 2*step, ...: work arrives at its submit time, decisions are applied
    between cycles and the running work listed in `finishes[k]` (by index) ends after cycle k.
    Yields (snapshot, pending, decisions, now) for each cycle."""
    now = 0.0
    future = sorted(workloads, key=lambda w: (w.submitted_at, w.id))
    pending: list = []
    for k in range(len(finishes) + 1):
        pending += [w for w in future if w.submitted_at <= now]
        future = [w for w in future if w.submitted_at > now]
        d = cycle(snap, pending, now, config)
        yield snap, pending, d, now
        snap, pending = apply(snap, pending, d, now)
        if k < len(finishes):
            done = {rw.workload.id for i, rw in enumerate(snap.running) if i in finishes[k]}
            snap = dataclasses.replace(
                snap, running=tuple(rw for rw in snap.running if rw.workload.id not in done)
            )
        now += step


#: the configurations the property tests run under (test_cache adds its own to these)
CONFIG_CHOICES = [
    SchedulerConfig(min_runtime_s=0),
    SchedulerConfig(min_runtime_s=150),
    SchedulerConfig(backfill=False, min_runtime_s=0),
    SchedulerConfig(preemption=False),
    SchedulerConfig(policy=Policy.FIFO),
    SchedulerConfig(policy=Policy.LAS),
]
POLICIES = st.sampled_from(CONFIG_CHOICES)
FINISHES = st.lists(st.sets(st.integers(0, 6), max_size=3), min_size=2, max_size=5)


@SETTINGS
@given(scenarios(), POLICIES, FINISHES)
def test_invariants_hold_over_several_cycles(scenario, config, finishes):
    snap, pending = scenario
    for s, p, d, now in run_cycles(snap, pending, config, finishes):
        check_decisions(s, p, d, now, config)


@SETTINGS
@given(scenarios(), POLICIES)
def test_same_input_same_decisions(scenario, config):
    snap, pending = scenario
    # a few cycles in, so that running work, holds and reclaims are part of the input
    states = list(run_cycles(snap, pending, config, [set()]))
    s, p, d, now = states[-1]
    assert cycle(s, p, now, config) == d
    assert cycle(s, list(reversed(p)), now, config) == d  # order of the list does not matter


@SETTINGS
@given(
    scenarios(one_gpu_jobs=True, quotas=False),
    st.lists(st.sets(st.integers(0, 6), max_size=1), min_size=2, max_size=4),
)
def test_tenant_below_guarantee_waits_at_most_one_cycle_while_others_borrow(scenario, finishes):
    snap, pending = scenario
    config = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)
    tenants = {t.name: t.quota.guaranteed_milli for t in snap.tenants}
    starved_runs: dict[str, int] = {}
    for s, p, d, now in run_cycles(snap, pending, config, finishes + [set()] * 3):
        check_decisions(s, p, d, now, config)
        use: dict[str, int] = {}
        for rw in s.running:
            use[rw.workload.tenant] = use.get(rw.workload.tenant, 0) + rw.allocation.gpu_milli
        can_give = {rw.workload.tenant for rw in s.running if rw.workload.preemptible}
        borrowing = {t for t, g in tenants.items() if use.get(t, 0) > g and t in can_give}
        got = {by.workload_id for by in d.admissions}
        for t, g in tenants.items():
            waiting = [w for w in p if w.tenant == t]
            starved = (
                waiting
                and use.get(t, 0) + MILLI_PER_GPU <= g
                and bool(borrowing - {t})
                and not any(w.id in got for w in waiting)
            )
            starved_runs[t] = starved_runs.get(t, 0) + 1 if starved else 0
            assert starved_runs[t] <= 2, f"{t} below its guarantee kept waiting: {d.pending}"
