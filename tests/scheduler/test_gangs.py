"""Multi-node requests (gangs): all-or-nothing admission across nodes, topology, reservations
that keep small work from starving a gang, backfill that ends before the gang is due,
preemption of a gang as one unit, reasons; property tests of atomicity and capacity."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain import MILLI_PER_GPU, Node, Request, ValidationError, Workload
from gpupool.scheduler import Policy, SchedulerCache, SchedulerConfig, Snapshot, cycle
from gpupool.scheduler.followup import nominations
from tests.scheduler.builders import apply, job, node, nodes, running, snapshot, tenant

FAIR = SchedulerConfig(min_runtime_s=0, reclaim_after_s=0)


def gang(id: str, n: int, per: int, tenant: str = "lab-a", submit: float = 0, **kw) -> Workload:
    w = job(id, tenant=tenant, gpus=n * per, submit=submit, **kw)
    return dataclasses.replace(w, request=dataclasses.replace(w.request, nodes=n))


def labelled(name: str, **labels: str) -> Node:
    return dataclasses.replace(node(name), labels=tuple(sorted(labels.items())))


def test_request_validates_nodes_and_gpus_per_node():
    r = Request(gpus=16, nodes=2)
    assert r.gpus_per_node == 8 and r.total_gpu_milli == 16 * MILLI_PER_GPU
    assert r.describe() == "2 nodes x 8 GPUs"
    with pytest.raises(ValidationError, match="gpus_per_node"):
        Request(gpus=3, nodes=2)
    with pytest.raises(ValidationError, match="gpus_per_node"):
        Request(gpu_milli=500, nodes=2)
    with pytest.raises(ValidationError, match="nodes must be >= 1"):
        Request(gpus=1, nodes=0)


def test_gang_is_admitted_on_n_distinct_nodes_at_once():
    snap = snapshot(nodes("n", 3), [tenant("lab-a", 24)])
    d = cycle(snap, [gang("g", 2, 8)], 0.0, FAIR)
    (a,) = d.admissions
    alloc = a.allocation
    assert alloc.multi_node and len(alloc.nodes) == 2 and alloc.node == alloc.nodes[0]
    for name in alloc.nodes:
        assert len(alloc.on_node(name)) == 8 and all(s.whole for s in alloc.on_node(name))


def test_gang_never_runs_in_part():
    # 8 + 8 free on two nodes, 4 on the third: a 3 x 8 gang waits whole, it takes nothing
    n = nodes("n", 3)
    busy = running(job("busy", tenant="lab-b", gpus=4, preemptible=False), n[2], range(4))
    snap = snapshot(n, [tenant("lab-a", 24), tenant("lab-b")], [busy])
    d = cycle(snap, [gang("g", 3, 8)], 0.0, FAIR)
    assert d.admissions == () and d.preemptions == ()
    assert d.pending["g"].reason.startswith("needs 3 nodes with 8 free GPUs each; 2 have them now")


def test_gang_within_its_guarantee_reclaims_on_n_nodes_then_starts_there():
    # lab-b (no guarantee) borrows 4 GPUs on each of n1 and n2; lab-a's 3 x 8 gang is within
    # its guarantee of 24: it preempts both, keeps the three nodes, and starts next cycle
    n = nodes("n", 3)
    run = [
        running(job(f"b{i}", tenant="lab-b", gpus=4), n[i], range(4), since=-3600) for i in (1, 2)
    ]
    snap = snapshot(n, [tenant("lab-a", 24), tenant("lab-b")], run)
    other = job("b-more", tenant="lab-b", gpus=4, submit=-10)  # would take the freed GPUs
    d = cycle(snap, [gang("g", 3, 8), other], 0.0, FAIR)
    assert sorted(p.workload_id for p in d.preemptions) == ["b1", "b2"]
    assert {p.for_workload for p in d.preemptions} == {"g"}
    assert "on 3 nodes held for it" in d.pending["g"].reason
    assert d.admissions == ()  # nothing else lands on the nodes held for the gang
    node_of = {rw.workload.id: rw.allocation.node for rw in run}
    snap2, pending = apply(snap, [gang("g", 3, 8), other], d, 0.0)
    snap2 = dataclasses.replace(snap2, nominated=nominations(d.preemptions, node_of))
    d2 = cycle(snap2, pending, 1.0, FAIR)
    assert [a.workload_id for a in d2.admissions][:1] == ["g"]
    assert sorted(d2.admissions[0].allocation.nodes) == ["n-0", "n-1", "n-2"]


def test_gang_reclaim_is_all_or_nothing():
    # only n1's borrowed work may be taken (n2's is not preemptible): one node is not
    # enough for a 3 x 8 gang, so nothing is preempted
    n = nodes("n", 3)
    run = [
        running(job("b1", tenant="lab-b", gpus=4), n[1], range(4), since=-3600),
        running(job("b2", tenant="lab-b", gpus=4, preemptible=False), n[2], range(4)),
    ]
    snap = snapshot(n, [tenant("lab-a", 24), tenant("lab-b")], run)
    d = cycle(snap, [gang("g", 3, 8)], 0.0, FAIR)
    assert d.preemptions == ()
    assert d.pending["g"].reason.startswith("needs 3 nodes with 8 free GPUs each")


def test_gang_wider_than_the_cluster_is_unschedulable():
    snap = snapshot(nodes("n", 2), [tenant("lab-a", 16)])
    d = cycle(snap, [gang("g", 3, 8), gang("h", 2, 9)], 0.0, FAIR)
    assert "only 2 nodes could ever hold that" in d.unschedulable["g"]
    assert "no node could hold one part" in d.unschedulable["h"]


def test_topology_prefers_nodes_of_one_rack():
    key = "topology.gpupool.io/rack"
    ns = [
        labelled("a-0", **{key: "r1"}),
        labelled("b-0", **{key: "r2"}),
        labelled("b-1", **{key: "r2"}),
        labelled("a-1", **{key: "r1"}),
    ]
    snap = snapshot(ns, [tenant("lab-a", 32)])
    d = cycle(snap, [gang("g", 2, 8)], 0.0, FAIR)
    assert set(d.admissions[0].allocation.nodes) == {"a-0", "a-1"}  # r1 before r2 by name
    # the closest key wins: an NVLink clique across racks beats a rack
    ns2 = [
        dataclasses.replace(
            n,
            labels=n.labels
            + (("nvidia.com/gpu.clique", "c1" if n.name in ("a-0", "b-0") else "c2"),),
        )
        for n in ns
    ]
    snap2 = snapshot(ns2, [tenant("lab-a", 32)])
    d2 = cycle(snap2, [gang("g", 2, 8)], 0.0, FAIR)
    assert set(d2.admissions[0].allocation.nodes) == {"a-0", "b-0"}
    # keys are configurable: only the rack key
    d3 = cycle(snap2, [gang("g", 2, 8)], 0.0, dataclasses.replace(FAIR, topology_keys=(key,)))
    assert set(d3.admissions[0].allocation.nodes) == {"a-0", "a-1"}


def test_smaller_domain_that_fits_is_preferred_over_a_larger_one():
    key = "topology.gpupool.io/rack"
    ns = [labelled(f"big-{i}", **{key: "big"}) for i in range(4)]
    ns += [labelled(f"small-{i}", **{key: "small"}) for i in range(2)]
    snap = snapshot(ns, [tenant("lab-a", 64)])
    d = cycle(snap, [gang("g", 2, 8)], 0.0, FAIR)
    assert set(d.admissions[0].allocation.nodes) == {"small-0", "small-1"}


def test_reservation_keeps_small_work_from_starving_a_gang():
    # two nodes, each half busy (with work that may not be preempted); a 2 x 8 gang waits;
    # 1-GPU jobs behind it must not take the free GPUs of the nodes held for it
    n = nodes("n", 2)
    run = [
        running(job("r0", tenant="lab-b", gpus=4, preemptible=False), n[0], range(4)),
        running(job("r1", tenant="lab-b", gpus=4, preemptible=False), n[1], range(4)),
    ]
    snap = snapshot(n, [tenant("lab-a", 16), tenant("lab-b", 0)], run)
    small = [job(f"s{i}", tenant="lab-b", gpus=1, submit=1) for i in range(4)]
    for config in (FAIR, SchedulerConfig(policy=Policy.FIFO)):
        d = cycle(snap, [gang("g", 2, 8)] + small, 0.0, config)
        assert d.admissions == (), config.policy
        assert "are held for it" in d.pending["g"].reason
        assert "g" in d.pending["s0"].reason  # behind the gang
    # without gang reservations the small work takes them (what the reservation prevents)
    d = cycle(snap, [gang("g", 2, 8)] + small, 0.0, dataclasses.replace(FAIR, gang_reservations=0))
    assert len(d.admissions) == 4


def test_backfill_on_held_nodes_only_by_work_that_ends_before_the_gang_is_due():
    n = nodes("n", 2)
    r0 = dataclasses.replace(
        job("r0", tenant="lab-b", gpus=4, preemptible=False), max_runtime_s=1000
    )
    r1 = dataclasses.replace(
        job("r1", tenant="lab-b", gpus=4, preemptible=False), max_runtime_s=1000
    )
    run = [running(r0, n[0], range(4)), running(r1, n[1], range(4))]
    snap = snapshot(n, [tenant("lab-a", 16), tenant("lab-b", 0)], run)
    short = dataclasses.replace(job("short", tenant="lab-b", gpus=2, submit=1), max_runtime_s=500)
    long = dataclasses.replace(job("long", tenant="lab-b", gpus=2, submit=1), max_runtime_s=5000)
    d = cycle(snap, [gang("g", 2, 8), long, short], 100.0, FAIR)
    assert [a.workload_id for a in d.admissions] == ["short"]  # ends at 600 < due 1000
    assert d.pending["g"].wait is not None and d.pending["g"].wait.expected_start == 1000.0


def test_running_gang_is_counted_on_every_node_and_cache_agrees():
    n = nodes("n", 3)
    snap = snapshot(n, [tenant("lab-a", 24)])
    d = cycle(snap, [gang("g", 2, 8)], 0.0, FAIR)
    snap2, _ = apply(snap, [gang("g", 2, 8)], d, 0.0)
    cache = SchedulerCache()
    cycle(snap, [], 0.0, FAIR, cache)
    # with the gang running only one node is free: an 8-GPU job fits once, a second waits
    pend = [job("a", gpus=8, submit=1), job("b", gpus=8, submit=2)]
    fresh = cycle(snap2, pend, 10.0, FAIR)
    kept = cycle(snap2, pend, 10.0, FAIR, cache)
    assert fresh == kept
    assert [a.workload_id for a in fresh.admissions] == ["a"]
    assert fresh.admissions[0].allocation.node not in d.admissions[0].allocation.nodes


def test_gang_is_preempted_as_one_unit_and_frees_its_node_there():
    n = nodes("n", 2)
    g = gang("g", 2, 8, tenant="lab-b")
    shares = []
    for nd in n:
        shares += list(running(job("x", gpus=8), nd, range(8)).allocation.shares)
    rg = running(g, n[0], range(8))
    rg = dataclasses.replace(
        rg, allocation=dataclasses.replace(rg.allocation, shares=tuple(shares))
    )
    snap = snapshot(n, [tenant("lab-a", 8), tenant("lab-b", 0)], [rg])
    d = cycle(snap, [job("w", tenant="lab-a", gpus=8)], 1000.0, FAIR)
    assert [p.workload_id for p in d.preemptions] == ["g"]
    # once it has stopped, both its nodes are free again
    snap2, pend = apply(snap, [job("w", tenant="lab-a", gpus=8)], d, 1000.0)
    assert "g" in {w.id for w in pend} and snap2.running == ()


# -- properties --------------------------------------------------------------------------------


@st.composite
def gang_scenarios(draw):
    racks = ["r1", "r2", "r3"]
    ns = []
    for i in range(draw(st.integers(2, 6))):
        nd = node(
            f"n{i}",
            gpus=draw(st.sampled_from([4, 8])),
            model=draw(st.sampled_from(["A100", "H100"])),
            cpus=draw(st.integers(8, 32)),
            state=draw(st.sampled_from(["ready"] * 6 + ["down"])),
        )
        rack = draw(st.sampled_from(racks + [None]))
        if rack:
            nd = dataclasses.replace(nd, labels=(("topology.gpupool.io/rack", rack),))
        ns.append(nd)
    total = sum(len(n.gpus) for n in ns)
    tenants = [tenant("t0", total // 2), tenant("t1", total // 4), tenant("t2", 0)]
    ws = []
    for i in range(draw(st.integers(1, 10))):
        t = draw(st.sampled_from(["t0", "t1", "t2"]))
        submit = draw(st.sampled_from([0, 0, 100, 200]))
        cpus = draw(st.sampled_from([1, 4]))
        if draw(st.booleans()):
            w = gang(
                f"g{i}", draw(st.integers(2, 4)), draw(st.integers(1, 8)), t, submit, cpus=cpus
            )
        else:
            w = job(f"j{i}", tenant=t, gpus=draw(st.integers(1, 8)), submit=submit, cpus=cpus)
        if draw(st.booleans()):
            w = dataclasses.replace(w, max_runtime_s=draw(st.sampled_from([50.0, 150.0, 400.0])))
        if draw(st.booleans()):
            w = dataclasses.replace(w, checkpointing=True)
        ws.append(w)
    return snapshot(ns, tenants), ws


def _check(snap: Snapshot, pending: list[Workload], d) -> None:
    nodes_by = {n.name: n for n in snap.nodes}
    by_id = {w.id: w for w in pending}
    allocs = [rw.allocation for rw in snap.running] + [a.allocation for a in d.admissions]
    milli: dict[tuple[str, int], int] = {}
    cpu: dict[str, int] = {}
    for a in allocs:
        for name in a.nodes:
            cpu[name] = cpu.get(name, 0) + a.cpu_milli
        for s in a.shares:
            milli[(s.node, s.gpu_index)] = milli.get((s.node, s.gpu_index), 0) + s.milli
    assert all(m <= MILLI_PER_GPU for m in milli.values()), "a GPU over-committed"
    assert all(c <= nodes_by[n].cpu_milli for n, c in cpu.items()), "a node over-committed"
    for a in d.admissions:
        r = by_id[a.workload_id].request
        al = a.allocation
        assert len(al.nodes) == r.nodes, "a gang admitted in part"
        for name in al.nodes:
            part = al.on_node(name)
            assert len(part) == r.gpus_per_node, "a gang node got the wrong GPU count"
            assert nodes_by[name].schedulable
        models = {nodes_by[s.node].gpu(s.gpu_index).model for s in al.shares}
        assert len(models) == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gang_scenarios(),
    st.sampled_from(
        [
            FAIR,
            dataclasses.replace(FAIR, gang_clears_nodes=True),
            SchedulerConfig(policy=Policy.FIFO),
            SchedulerConfig(policy=Policy.LAS),
            SchedulerConfig(min_runtime_s=150),
            SchedulerConfig(backfill=False, min_runtime_s=0),
        ]
    ),
    st.lists(st.sets(st.integers(0, 5), max_size=3), min_size=2, max_size=5),
)
def test_gangs_never_partial_and_never_overcommit(scenario, config, finishes):
    snap, workloads = scenario
    cache = SchedulerCache()
    now = 0.0
    future = sorted(workloads, key=lambda w: (w.submitted_at, w.id))
    pending: list[Workload] = []
    for k in range(len(finishes) + 1):
        pending += [w for w in future if w.submitted_at <= now]
        future = [w for w in future if w.submitted_at > now]
        d = cycle(snap, pending, now, config)
        assert cycle(snap, pending, now, config, cache) == d  # a kept cache changes nothing
        _check(snap, pending, d)
        for p in d.preemptions:  # a gang victim stops whole: all its nodes are freed
            assert p.workload_id in {rw.workload.id for rw in snap.running}
        snap, pending = apply(snap, pending, d, now)
        if k < len(finishes):
            done = {rw.workload.id for i, rw in enumerate(snap.running) if i in finishes[k]}
            snap = dataclasses.replace(
                snap, running=tuple(rw for rw in snap.running if rw.workload.id not in done)
            )
        now += 100.0


def test_a_borrowing_gangs_hold_never_keeps_guaranteed_work_waiting():
    # lab-b's gang (16 GPUs) is beyond its guarantee of 0: it holds the two nodes against
    # other borrowers, but lab-a's guaranteed job may still use them
    n = nodes("n", 2)
    run = [
        running(job("r0", tenant="lab-c", gpus=4), n[0], range(4)),
        running(job("r1", tenant="lab-c", gpus=4), n[1], range(4)),
    ]
    ts = [tenant("lab-a", 4), tenant("lab-b", 0), tenant("lab-c", 0)]
    snap = snapshot(n, ts, run)
    pend = [
        gang("g", 2, 8, tenant="lab-b"),
        job("borrower", tenant="lab-c", gpus=2, submit=1),
        job("owed", tenant="lab-a", gpus=2, submit=2),
    ]
    d = cycle(snap, pend, 0.0, FAIR)
    assert [a.workload_id for a in d.admissions] == ["owed"]
    assert "held for it" in d.pending["g"].reason
    assert "g" in d.pending["borrower"].reason


def test_a_running_gang_with_a_max_runtime_dates_a_reservation_on_its_second_node():
    # g runs on n-0 (rank 0) and n-1 until 1000; a 2 x 8 gang waiting for both nodes is due
    # then — before, only n-0 knew g, so n-1 gave no date and the wait had none
    n = nodes("n", 2)
    g = dataclasses.replace(gang("g", 2, 4, tenant="lab-b"), max_runtime_s=1000)
    rg = running(g, n[0], range(4))
    shares = rg.allocation.shares + running(g, n[1], range(4)).allocation.shares
    rg = dataclasses.replace(rg, allocation=dataclasses.replace(rg.allocation, shares=shares))
    snap = snapshot(n, [tenant("lab-a", 16), tenant("lab-b", 0)], [rg])
    d = cycle(snap, [gang("w", 2, 8)], 100.0, SchedulerConfig(preemption=False))
    assert d.pending["w"].wait is not None and d.pending["w"].wait.expected_start == 1000.0


def test_under_fair_the_gang_waiting_longest_holds_nodes_whatever_the_tenant_order():
    # lab-a comes first in the tenant order (a tie broken by name), but lab-b's gang was
    # submitted first: it holds the nodes, as under fifo, so the hold does not move from
    # gang to gang as the tenant order changes between cycles (issue 32)
    n = nodes("n", 2)
    run = [
        running(job("r0", tenant="lab-c", gpus=4, preemptible=False), n[0], range(4)),
        running(job("r1", tenant="lab-c", gpus=4, preemptible=False), n[1], range(4)),
    ]
    snap = snapshot(n, [tenant("lab-a", 8), tenant("lab-b", 8), tenant("lab-c", 0)], run)
    pend = [gang("new", 2, 8, tenant="lab-a", submit=5), gang("old", 2, 8, tenant="lab-b")]
    for config in (FAIR, SchedulerConfig(policy=Policy.FIFO)):
        d = cycle(snap, pend, 10.0, config)
        assert d.admissions == ()
        assert "held for it" in d.pending["old"].reason, config.policy
        assert "held for it" not in d.pending["new"].reason, config.policy
