"""SchedulerCache: decisions with a cache kept over many cycles are those of cache=None, and
the capacity index it diffs forward equals one built afresh."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain import GPUHealth, NodeState
from gpupool.scheduler import Policy, SchedulerConfig, Snapshot, cycle
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import CapacityIndex
from gpupool.scheduler.types import PendingInfo, pending_info
from tests.scheduler.builders import apply, job, node, running, snapshot, tenant, tree
from tests.scheduler.test_properties import CONFIG_CHOICES, scenarios

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONFIGS = st.sampled_from(
    [
        *CONFIG_CHOICES,
        SchedulerConfig(min_runtime_s=0, max_admissions_per_cycle=1),
        # relative service levels: the ladder moves with Snapshot.service_scale ("scale")
        SchedulerConfig(
            min_runtime_s=0, service_levels_relative=(0.5, 5.0), preempt_levels_apart=1
        ),
    ]
)

#: what may happen between two cycles, besides applying the decisions
CHANGES = st.sampled_from(
    [
        "none",
        "none",
        "finish",
        "stopping",
        "node_down",
        "node_up",
        "gpu_unhealthy",
        "heartbeat",
        "node_cpus",
        "equal_copies",
        "node_added",
        "duplicate_running",
        "running_reversed",
        "tenants_copy",
        "submit",
        "submit",
        "submit_unknown_tenant",
        "pending_copies",
        "pending_reversed",
        "pending_twice",
        "pending_running",
        "attained",
        "attained_gone",
        "scale",
    ]
)


def change_pending(
    snap: Snapshot, pending: list, what: str, k: int, now: float
) -> tuple[Snapshot, list]:
    """`snap` and `pending` after a change on the pending side of kind `what` (`k` picks the
    workload): the cache keeps its classification of pending work and must follow these."""
    tenants = [t.name for t in snap.tenants if snap.tenants.is_leaf(t.name)]
    if what == "submit":
        w = job(f"new{k}-{now:.0f}", tenant=tenants[k % len(tenants)], gpus=1 + k % 2, submit=now)
        pending = [*pending, w] if k % 2 else [w, *pending]
    elif what == "submit_unknown_tenant":
        pending = [*pending, job(f"lost{k}-{now:.0f}", tenant="nobody", gpus=1, submit=now)]
    elif what == "pending_copies":  # a server reading the store: new, equal objects
        pending = [dataclasses.replace(w) for w in pending]
    elif what == "pending_reversed":
        pending = pending[::-1]
    elif what == "pending_twice" and pending:
        pending = [*pending, pending[k % len(pending)]]
    elif what == "pending_running" and snap.running:
        pending = [*pending, snap.running[k % len(snap.running)].workload]
    elif what == "attained" and pending:  # kept service of a requeued workload changes
        wid = pending[k % len(pending)].id
        service = dict(snap.attained_service, **{wid: 1000.0 * 3600 * (1 + k)})
        snap = dataclasses.replace(snap, attained_service=service)
    elif what == "attained_gone" and snap.attained_service:
        service = dict(snap.attained_service)
        service.pop(sorted(service)[k % len(service)])
        snap = dataclasses.replace(snap, attained_service=service)
    return snap, pending


def change(snap: Snapshot, what: str, k: int) -> Snapshot:
    """`snap` after one change of kind `what` (`k` picks the node or the workload)."""
    nodes = list(snap.nodes)
    run = list(snap.running)
    n = k % len(nodes)
    if what == "finish" and run:
        del run[k % len(run)]
    elif what == "stopping" and run:
        i = k % len(run)
        run[i] = dataclasses.replace(run[i], stopping=True)
    elif what == "node_down":
        nodes[n] = dataclasses.replace(nodes[n], state=NodeState.DOWN)
    elif what == "node_up":
        nodes[n] = dataclasses.replace(nodes[n], state=NodeState.READY)
    elif what == "gpu_unhealthy" and nodes[n].gpus:
        gpus = list(nodes[n].gpus)
        gpus[0] = dataclasses.replace(gpus[0], health=GPUHealth.UNHEALTHY)
        nodes[n] = dataclasses.replace(nodes[n], gpus=tuple(gpus))
    elif what == "heartbeat":
        nodes = [dataclasses.replace(x, last_heartbeat=float(k)) for x in nodes]
    elif what == "node_cpus":
        nodes[n] = dataclasses.replace(nodes[n], cpu_milli=nodes[n].cpu_milli // 2)
    elif what == "equal_copies":  # what a server reading the store gives: new, equal objects
        nodes = [dataclasses.replace(x) for x in nodes]
        run = [dataclasses.replace(rw, allocation=dataclasses.replace(rw.allocation)) for rw in run]
    elif what == "node_added":
        nodes.append(node(f"x{k}", gpus=2, model="A100", cpus=8, memory_gib=64))
    elif what == "duplicate_running" and run:
        run.append(run[k % len(run)])
    elif what == "running_reversed":  # listed in another order: gone and new, nothing moves
        run.reverse()
    elif what == "tenants_copy":
        return dataclasses.replace(snap, tenants=tree(*snap.tenants), running=tuple(run))
    elif what == "scale":  # the caller's run-length scale moved (0: none, absolute levels)
        return dataclasses.replace(snap, service_scale=[0.0, 60.0, 600.0, 3600.0][k % 4])
    return dataclasses.replace(snap, nodes=tuple(nodes), running=tuple(run))


@st.composite
def checkpointing_scenarios(draw):
    """`scenarios()` with some work checkpointing: service levels, siblings' levels (which
    move while work waits) and the reclaim order of checkpointing victims come into play."""
    snap, pending = draw(scenarios())
    flags = draw(st.lists(st.booleans(), min_size=len(pending), max_size=len(pending)))
    return snap, [
        dataclasses.replace(w, checkpointing=f) for w, f in zip(pending, flags, strict=True)
    ]


@SETTINGS
@given(
    st.one_of(scenarios(), checkpointing_scenarios()),
    CONFIGS,
    st.lists(st.tuples(CHANGES, st.integers(0, 20)), min_size=1, max_size=8),
    st.booleans(),
)
def test_decisions_with_a_kept_cache_equal_decisions_without(scenario, config, steps, grouped):
    """`grouped`: pending work listed tenant by tenant, as the simulator does (the cache then
    reuses whole tenant queues)."""
    snap, pending = scenario
    cache = SchedulerCache()
    now = 0.0
    for what, k in steps + [("none", 0)]:
        if grouped:
            pending = sorted(pending, key=lambda w: w.tenant)
        d = cycle(snap, pending, now, config, cache)
        fresh = cycle(snap, pending, now, config)
        assert d == fresh, f"differs after {what}"
        assert list(d.unschedulable) == list(fresh.unschedulable)
        assert list(d.pending) == list(fresh.pending)
        snap, pending = apply(snap, pending, d, now)
        snap = change(snap, what, k)
        snap, pending = change_pending(snap, pending, what, k, now)
        now += 100.0


def _index_state(cap: CapacityIndex) -> tuple:
    """Everything a query of the index can observe."""

    def buckets(indexes: dict) -> dict:
        out = {}
        for m, idx in indexes.items():
            keys = idx.keys()  # a BucketIndex, not a dict
            out[m] = [(key, idx.items_under(key)) for key in keys]
        return out

    return (
        cap.free_cpu,
        cap.free_mem,
        cap.free_milli,
        cap.free_gmem,
        cap.node_held,
        cap.node_ready,
        cap.gpu_ok,
        cap.node_free_milli,
        cap.node_whole_free,
        cap.total_gpu_milli(),
        buckets(cap.whole),
        buckets(cap.whole_unshared),
        buckets(cap.frac),
    )


def _setup():
    n0 = node("n0", gpus=4, model="A100", gpu_gib=40, cpus=16, memory_gib=64)
    n1 = node("n1", gpus=2, model="H100", sharing="shared", cpus=8, memory_gib=64)
    a = job("a", tenant="t", gpus=2, model="A100", cpus=2)
    b = job("b", tenant="t", fraction=0.5, gpu_gib=10)
    c = job("c", tenant="t", gpus=1)
    ra = running(a, n0, [0, 1])
    rb = running(b, n1, fraction=(0, 500, 10 * 1024))
    rc = running(c, n1, [1])
    return (n0, n1), (ra, rb, rc)


def _synced(cache: SchedulerCache, nodes, run) -> CapacityIndex:
    """Sync the cache as a cycle would, and check it against a fresh index."""
    cap = cache.capacity(tuple(nodes), tuple(run))
    assert _index_state(cap) == _index_state(CapacityIndex(tuple(nodes), tuple(run)))
    held: dict = {}
    staying: dict = {}
    for rw in run:
        k = (rw.workload.tenant, rw.workload.owner)
        held[k] = held.get(k, 0) + rw.allocation.gpu_milli
        if not rw.stopping:
            staying[k] = staying.get(k, 0) + rw.allocation.gpu_milli
    nonzero = ({k: v for k, v in held.items() if v}, {k: v for k, v in staying.items() if v})
    assert cache.held() == nonzero
    assert cache.checkpointing() == sum(rw.workload.checkpointing for rw in run)
    assert cache.stopping() == sum(rw.stopping for rw in run)
    assert cache.limited() == {
        rw.workload.id: rw for rw in run if rw.workload.max_runtime_s is not None
    }
    return cap


def test_allocations_added_and_removed_are_diffed_not_rebuilt():
    nodes, (ra, rb, rc) = _setup()
    cache = SchedulerCache()
    _synced(cache, nodes, [ra])
    assert cache.stats.rebuilds == 1
    cap = _synced(cache, nodes, [ra, rb, rc])
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (2, 0)
    assert cap.free_milli[cap.gpu_id(1, 0)] == 500
    _synced(cache, nodes, [rc])
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (2, 2)
    assert (cache.stats.rebuilds, cache.stats.diffs) == (1, 2)


def test_running_work_listed_in_another_order_is_diffed_and_nothing_moves():
    nodes, (ra, rb, rc) = _setup()
    cache = SchedulerCache()
    _synced(cache, nodes, [ra, rb, rc])
    _synced(cache, nodes, [rc, rb, ra])
    _synced(cache, nodes, [rb, ra])
    assert (cache.stats.rebuilds, cache.stats.diffs) == (1, 2)
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (0, 1)


def test_a_cycles_own_assumptions_and_holds_are_undone():
    nodes, (ra, rb, rc) = _setup()
    cache = SchedulerCache()
    cap = _synced(cache, nodes, [ra])
    cap.assume(0, [(cap.gpu_id(0, 2), 1000, 40 * 1024)], 1000, 1024)
    cap.hold(1)
    assert cap.node_held[1] and cap.whole["H100"].key_of(1) is None
    cap = _synced(cache, nodes, [ra, rb])
    assert not cap.node_held[1]
    assert cache.stats.rebuilds == 1


def test_admissions_that_run_as_admitted_stay_taken_the_others_are_undone():
    """The last cycle's admissions that now run with their allocation (equal or the same
    object) are not undone and applied again; one that runs elsewhere, or not at all, is."""
    n0 = node("n0", gpus=4, model="A100", gpu_gib=40, cpus=16, memory_gib=64)
    n1 = node("n1", gpus=2, model="H100", sharing="shared", cpus=8, memory_gib=64)
    tenants = tree(tenant("t", guaranteed=6))
    pending = [
        job("a", tenant="t", gpus=2, model="A100", cpus=2),
        dataclasses.replace(job("b", tenant="t", fraction=0.5, gpu_gib=10), checkpointing=True),
        dataclasses.replace(job("c", tenant="t", gpus=1, model="A100"), max_runtime_s=600.0),
    ]
    cache = SchedulerCache()
    snap = snapshot([n0, n1], tenants)
    d = cycle(snap, pending, 0.0, SchedulerConfig(), cache)
    assert len(d.admissions) == 3
    snap, left = apply(snap, pending, d, 0.0)
    run = list(snap.running)
    by_id = {rw.workload.id: i for i, rw in enumerate(run)}
    # a: an equal copy (as read from a store); b: as admitted; c: started somewhere else
    ra = run[by_id["a"]]
    run[by_id["a"]] = dataclasses.replace(ra, allocation=dataclasses.replace(ra.allocation))
    rc = run[by_id["c"]]
    other = 3 if rc.allocation.shares[0].gpu_index != 3 else 2
    run[by_id["c"]] = running(rc.workload, n0, [other])
    _synced(cache, (n0, n1), run)
    assert cache.stats.admissions_kept == 2  # not c: undone, its new allocation applied
    cap = cache.capacity((n0, n1), tuple(run))  # (the same again: nothing to do)
    for rw in run:  # what is kept for each equals what its allocation takes
        assert cache._taken[rw.workload.id][2] == cap.takes_of(rw)
    # the next cycle's admission does not start: undone
    d = cycle(
        dataclasses.replace(snap, running=tuple(run)),
        [job("e", tenant="t", gpus=1)],
        1.0,
        SchedulerConfig(),
        cache,
    )
    assert len(d.admissions) == 1
    kept = cache.stats.admissions_kept
    _synced(cache, (n0, n1), run)
    assert cache.stats.admissions_kept == kept


def test_an_allocation_that_changed_counts_as_removed_and_added():
    nodes, (ra, rb, rc) = _setup()
    cache = SchedulerCache()
    _synced(cache, nodes, [ra, rb])
    moved = running(rb.workload, nodes[1], fraction=(1, 250, 5 * 1024))
    _synced(cache, nodes, [ra, moved])
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (1, 1)
    same = dataclasses.replace(ra, allocation=dataclasses.replace(ra.allocation))
    _synced(cache, nodes, [same, moved])  # equal, not identical: unchanged
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (1, 1)
    _synced(cache, nodes, [same, dataclasses.replace(moved, stopping=True)])
    assert (cache.stats.allocations_added, cache.stats.allocations_removed) == (1, 1)


def test_node_state_and_size_changes_are_patched_structure_changes_rebuild():
    nodes, run = _setup()
    cache = SchedulerCache()
    _synced(cache, nodes, run)
    down = (dataclasses.replace(nodes[0], state=NodeState.DRAINING), nodes[1])
    cap = _synced(cache, down, run)
    assert cap.whole["A100"].key_of(0) is None and cap.total_gpu_milli() == 2000
    sick = list(nodes[1].gpus)
    sick[1] = dataclasses.replace(sick[1], health=GPUHealth.UNHEALTHY)
    smaller = (nodes[0], dataclasses.replace(nodes[1], gpus=tuple(sick), cpu_milli=4000))
    _synced(cache, smaller, run)
    assert cache.stats.rebuilds == 1 and cache.stats.nodes_changed == 3
    _synced(cache, (nodes[1], nodes[0]), run)  # reordered: rebuilt
    assert cache.stats.rebuilds == 2
    bigger = (dataclasses.replace(nodes[0], gpus=nodes[0].gpus[:2]), nodes[1])
    _synced(cache, bigger, run)  # GPUs changed: rebuilt
    assert cache.stats.rebuilds == 3


def test_a_workload_listed_twice_is_not_diffed_by_id():
    nodes, (ra, rb, rc) = _setup()
    cache = SchedulerCache()
    _synced(cache, nodes, [ra, rb])
    _synced(cache, nodes, [ra, rb, ra])
    _synced(cache, nodes, [ra, rb, ra])
    _synced(cache, nodes, [ra])  # the cache kept nothing from the last one: rebuilt too
    assert cache.stats.rebuilds == 4
    _synced(cache, nodes, [ra, rc])
    assert (cache.stats.rebuilds, cache.stats.diffs) == (4, 1)


def test_hardware_summary_is_kept_while_only_states_change():
    nodes, _ = _setup()
    cache = SchedulerCache()
    hw = cache.hardware(nodes)
    assert cache.hardware(tuple(dataclasses.replace(n, last_heartbeat=5.0) for n in nodes)) is hw
    down = (dataclasses.replace(nodes[0], state=NodeState.DOWN), nodes[1])
    assert cache.hardware(down) is hw
    assert cache.hardware((nodes[0],)) is not hw


def test_classification_memo_is_dropped_when_inputs_change():
    nodes, _ = _setup()
    cache = SchedulerCache()
    hw = cache.hardware(nodes)
    tenants = tree(tenant("t", 1))
    memo = cache.classified(hw, tenants, SchedulerConfig(), 10).entries
    memo[1] = ("x",)
    assert cache.classified(hw, tenants, SchedulerConfig(), 10).entries is memo
    assert cache.classified(hw, tenants, SchedulerConfig(policy=Policy.FIFO), 10).entries == {}
    assert cache.classified(hw, tree(tenant("t", 1)), SchedulerConfig(), 10).entries == {}


def test_clear_forgets_everything():
    nodes, run = _setup()
    cache = SchedulerCache()
    snap = snapshot(nodes, [tenant("t", 2)], run)
    cycle(snap, [job("w", tenant="t", gpus=4)], 0.0, SchedulerConfig(), cache)  # waits
    assert cache.info_pool(1)
    cache.clear()
    assert not cache.info_pool(1)
    _synced(cache, nodes, run)
    assert cache.stats.rebuilds == 2


@st.composite
def long_queues(draw):
    """Few GPUs, long queues of a few shapes, limits and user caps: many memo hits."""
    nodes = [node(f"n{i}", gpus=draw(st.integers(1, 4)), cpus=64) for i in range(2)]
    names = ["t0", "t1"]
    tenants = [
        tenant(
            t,
            draw(st.integers(0, 2)),
            draw(st.sampled_from([None, 2, 4])),
            1,
            draw(st.sampled_from([None, 1, 2])),
        )
        for t in names
    ]
    work = [
        job(
            f"w{i}",
            tenant=draw(st.sampled_from(names)),
            user=draw(st.sampled_from(["ann", "bob"])),
            gpus=draw(st.sampled_from([1, 1, 2, 4])),
            priority=draw(st.integers(0, 1)),
            submit=draw(st.sampled_from([0, 0, 150])),
        )
        for i in range(draw(st.integers(5, 30)))
    ]
    return snapshot(nodes, tree(*tenants)), work


@SETTINGS
@given(
    st.one_of(scenarios(), long_queues()),
    CONFIGS,
    st.lists(st.tuples(CHANGES, st.integers(0, 20)), max_size=4),
)
def test_the_rest_of_a_queue_filled_at_once_equals_the_walk_one_by_one(scenario, config, steps):
    """`_fill_tail` (the rest of a tenant's queue answered from the memos in one go) gives
    the decisions, reasons and positions of the walk without it."""
    from unittest import mock

    from gpupool.scheduler.cycle import _Cycle

    snap, pending = scenario
    cache = SchedulerCache()
    now = 0.0
    for what, k in steps + [("none", 0)]:
        d = cycle(snap, pending, now, config, cache)
        with mock.patch.object(_Cycle, "_fill_tail", lambda *a: None):
            assert d == cycle(snap, pending, now, config)
        snap, pending = apply(snap, pending, d, now)
        snap = change(snap, what, k)
        now += 100.0


def test_a_user_at_a_cap_keeps_the_one_by_one_walk():
    """Work behind a user cap refusal is not answered from the shape memo alone."""
    from unittest import mock

    from gpupool.scheduler.cycle import _Cycle

    h100, a100 = node("h", gpus=2), node("a", gpus=1, model="A100")
    busy = running(job("o1", tenant="o", gpus=1, model="A100"), a100, [0])
    snap = snapshot([h100, a100], [tenant("t", 2, None, 1, 1), tenant("o", 1)], [busy])
    pending = [
        job("bobA", tenant="t", user="bob", gpus=1, model="A100", submit=0),
        job("ann1a", tenant="t", user="ann", gpus=1, model="H100", submit=1),
        job("ann1b", tenant="t", user="ann", gpus=1, model="H100", submit=2),
        job("annA", tenant="t", user="ann", gpus=1, model="A100", submit=3),
    ]
    d = cycle(snap, pending, 0.0, SchedulerConfig(), SchedulerCache())
    with mock.patch.object(_Cycle, "_fill_tail", lambda *a: None):
        assert d == cycle(snap, pending, 0.0, SchedulerConfig())
    assert [a.workload_id for a in d.admissions] == ["ann1a"]
    assert d.pending["annA"].reason == d.pending["ann1b"].reason  # ann's cap
    assert d.pending["annA"].reason != d.pending["bobA"].reason


def test_a_queue_summary_is_kept_per_tenant_and_replaced_when_its_queue_changes():
    """The walk's queue summaries (`SchedulerCache.tails`) hold each tenant's current queue
    only: a queue that changed replaces the tenant's summary (the old queue is let go of at
    once, not kept until a clean-up)."""
    n0 = node("n0", gpus=4)
    busy = running(job("b", tenant="o", gpus=2), n0, [0, 1])
    snap = snapshot([n0], [tenant("t", 1), tenant("u", 1), tenant("o", 2)], [busy])
    cache = SchedulerCache()
    for c in range(6):
        # a new 4-GPU job in each tenant every cycle: all wait behind the first one's shape
        pending = [
            job(f"{t}{i}", tenant=t, gpus=4, submit=i) for t in ("t", "u") for i in range(c + 3)
        ]
        d = cycle(snap, pending, float(c), SchedulerConfig(), cache)
        assert not d.admissions
        tails = cache.tails()
        assert sorted(tails) == ["t", "u"]
        assert all(len(q) == c + 3 for q, _ in tails.values())


def test_pending_info_built_through_its_slots_equals_the_dataclass():
    a = pending_info("waiting", 3, 2)
    b = PendingInfo("waiting", 3, 2)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert dataclasses.replace(a, position=4) == PendingInfo("waiting", 4, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.reason = "x"  # type: ignore[misc]


@SETTINGS
@given(scenarios(), CONFIGS, st.integers(0, 50), st.floats(0.0, 1e7))
def test_the_classification_of_work_listed_twice_equals_the_diff_path(scenario, config, k, served):
    """A workload listed twice takes `Queues._classify_all`; the same work listed once takes
    `_classify_changes` (from an empty record): both must classify alike (the second listing
    ignored), with attained service re-keying one workload."""
    snap, pending = scenario
    if not pending:
        return
    wid = pending[k % len(pending)].id
    snap = dataclasses.replace(snap, attained_service={**snap.attained_service, wid: served})
    twice = [*pending, pending[k % len(pending)]]
    d = cycle(snap, twice, 0.0, config)
    once = cycle(snap, pending, 0.0, config)
    assert d == once
    assert list(d.unschedulable) == list(once.unschedulable)
    assert list(d.pending) == list(once.pending)
