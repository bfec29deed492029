"""Several engines in one pool: engine pins, node labels, multi-node only where an engine runs
it and on one engine, and quotas and reclaim across engines (gpupool.scheduler.constraints)."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain import Enforcement, Node, ValidationError
from gpupool.domain.placement import ENGINE_LABEL, MPS_LABEL, MULTI_NODE_LABEL
from gpupool.scheduler import Policy, SchedulerConfig, cycle
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.feasibility import never_runs
from tests.scheduler.builders import apply, job, node, running, snapshot, tenant, tree

NOW = 10_000.0


def on(n: Node, engine: str, multi: bool = False, mps: bool = False, **labels: str) -> Node:
    """`n` as engine `engine` registers it (with its capability labels and `labels`)."""
    extra = {ENGINE_LABEL: engine, **labels}
    if multi:
        extra[MULTI_NODE_LABEL] = "true"
    if mps:
        extra[MPS_LABEL] = "true"
    return dataclasses.replace(n, labels=tuple(sorted({**dict(n.labels), **extra}.items())))


def pin(w, engine: str | None = None, nodes: int = 1, **labels: str):
    r = w.request
    r = dataclasses.replace(r, engine=engine, node_labels=tuple(labels.items()), nodes=nodes)
    return dataclasses.replace(w, request=r)


def where(d, wid: str) -> tuple[str, ...]:
    return next(a.allocation.nodes for a in d.admissions if a.workload_id == wid)


LOCAL = on(node("ws", gpus=2), "local", mps=True)
SLURM = [on(node(f"slurm-{i}", gpus=4), "slurm", multi=True) for i in range(2)]
KUBE = on(node("kube-0", gpus=8), "kubernetes", zone="a")
POOL = [LOCAL, *SLURM, KUBE]
TENANTS = [tenant("lab-a", 4), tenant("lab-b", 2)]


def test_an_engine_pin_places_on_that_engine_only():
    # unpinned, one GPU goes to the smallest fit (the workstation); pinned, to a slurm node
    d = cycle(snapshot(POOL, TENANTS), [job("free", gpus=1)], NOW)
    assert where(d, "free") == ("ws",)
    d = cycle(snapshot(POOL, TENANTS), [pin(job("p", gpus=1), "slurm")], NOW)
    assert where(d, "p")[0].startswith("slurm-")
    d = cycle(snapshot(POOL, TENANTS), [pin(job("k", gpus=1), "kubernetes")], NOW)
    assert where(d, "k") == ("kube-0",)


def test_a_node_label_pin_places_on_a_node_with_the_label():
    d = cycle(snapshot(POOL, TENANTS), [pin(job("z", fraction=0), zone="a")], NOW)
    assert where(d, "z") == ("kube-0",)


def test_nodes_without_an_engine_label_count_as_any_engine():
    plain = node("plain", gpus=1)
    d = cycle(snapshot([plain], TENANTS), [pin(job("p", gpus=1), "slurm")], NOW)
    assert where(d, "p") == ("plain",)


def test_a_pinned_request_waits_with_a_reason_about_its_engine():
    full = [running(job(f"b{i}", "lab-b", "bob", gpus=1), KUBE, [i]) for i in range(7)]
    borrowers = [tenant("lab-a"), tenant("lab-b")]  # nothing to reclaim
    d = cycle(snapshot(POOL, borrowers, full), [pin(job("k", gpus=2), "kubernetes")], NOW)
    assert d.admissions == ()
    assert d.pending["k"].reason.startswith(
        "pinned to engine kubernetes: no node of it has 2 free GPUs (the most is 1)"
    )


def test_a_pin_no_node_could_ever_satisfy_never_runs():
    d = cycle(snapshot(POOL, TENANTS), [pin(job("x", gpus=1), "nomad")], NOW)
    assert d.unschedulable["x"] == (
        "pinned to engine nomad: no node of it is registered (the engines here: kubernetes, "
        "local, slurm)"
    )
    d = cycle(snapshot(POOL, TENANTS), [pin(job("z", gpus=1), zone="b")], NOW)
    assert d.unschedulable["z"] == "needs node label zone=b: no node has it"
    d = cycle(snapshot(POOL, TENANTS), [pin(job("big", gpus=8), "slurm")], NOW)
    assert d.unschedulable["big"].startswith("pinned to engine slurm; needs 8 GPUs on one node")


def test_never_runs_names_the_pin_as_the_field_at_fault():
    t = tree(*TENANTS)
    never = never_runs(pin(job("x", gpus=1), "nomad").request, "lab-a", t, POOL, Policy.FAIR)
    assert never is not None and never.field == "engine"
    assert "the engines here: kubernetes, local, slurm" in never.why
    never = never_runs(pin(job("x", gpus=1), zone="b").request, "lab-a", t, POOL, Policy.FAIR)
    assert never is not None and never.field == "node_labels"
    assert never_runs(pin(job("x", gpus=1), "slurm").request, "lab-a", t, POOL, Policy.FAIR) is None


def test_a_gang_runs_only_on_nodes_whose_engine_runs_multi_node_work():
    gang = pin(job("g", gpus=2), nodes=2)
    d = cycle(snapshot(POOL, TENANTS), [gang], NOW)
    assert sorted(where(d, "g")) == ["slurm-0", "slurm-1"]
    # slurm full: the kubernetes node (8 free) and the workstation (2 free) do not run gangs
    full = [running(job(f"b{i}", "lab-b", "bob", gpus=4), SLURM[i], range(4)) for i in range(2)]
    d = cycle(snapshot(POOL, [tenant("lab-a"), tenant("lab-b")], full), [gang], NOW)
    assert d.admissions == ()
    assert d.pending["g"].reason.startswith(
        "needs several nodes at once: only the slurm engine's nodes run multi-node work; "
        "needs 2 nodes on one engine with 1 free GPU each; 0 have them now"
    )
    # no engine runs multi-node work: never
    solo = [on(node("a", gpus=4), "local"), on(node("b", gpus=4), "kubernetes")]
    d = cycle(snapshot(solo, TENANTS), [gang], NOW)
    assert d.unschedulable["g"].startswith(
        "needs several nodes at once: no engine here runs multi-node work"
    )


def test_all_nodes_of_a_gang_run_on_one_engine():
    a = on(node("s", gpus=1), "slurm", multi=True)
    b = on(node("k", gpus=1), "kubernetes", multi=True)
    gang = pin(job("g", gpus=2), nodes=2)
    d = cycle(snapshot([a, b], TENANTS), [gang], NOW)
    assert d.admissions == ()
    assert d.unschedulable["g"].startswith("all of its nodes must run on one engine")
    c = on(node("s2", gpus=1), "slurm", multi=True)
    d = cycle(snapshot([a, b, c], TENANTS), [gang], NOW)
    assert sorted(where(d, "g")) == ["s", "s2"]


def test_a_guaranteed_tenant_reclaims_a_gpu_borrowed_on_another_engine():
    # lab-b borrows every GPU of the slurm nodes; lab-a (guaranteed 4) asks for one on slurm
    pool = [LOCAL, *SLURM]
    tenants = [tenant("lab-a", 4), tenant("lab-b", 0)]
    borrowed = [
        running(job(f"b{i}{k}", "lab-b", "bob", gpus=1), SLURM[i], [k], since=float(k + 4 * i))
        for i in range(2)
        for k in range(4)
    ] + [running(job(f"w{k}", "lab-b", "bob", gpus=1), LOCAL, [k]) for k in range(2)]
    config = SchedulerConfig(reclaim_after_s=0, min_runtime_s=0)
    want = pin(job("a", gpus=1), "slurm")
    snap = snapshot(pool, tenants, borrowed)
    d = cycle(snap, [want], NOW, config)
    assert len(d.preemptions) == 1
    victim = d.preemptions[0].workload_id
    assert victim.startswith("b")  # on a slurm node, not the workstation
    snap, pending = apply(snap, [want], d, NOW)
    d = cycle(snap, pending, NOW + 1, config)
    assert where(d, "a")[0].startswith("slurm-")
    # unpinned, the victim is chosen wherever it runs (the newest borrowed work: slurm-1's)
    d = cycle(snapshot(pool, tenants, borrowed), [job("u", gpus=1)], NOW, config)
    assert [p.workload_id for p in d.preemptions] == ["b13"]


def test_quota_counts_work_on_every_engine():
    tenants = [tenant("lab-a", 0, limit=2)]
    run = [running(job("r", gpus=1), LOCAL, [0])]
    d = cycle(snapshot(POOL, tenants, run), [pin(job("x", gpus=2), "slurm")], NOW)
    assert d.admissions == ()
    assert "limit" in d.pending["x"].reason


def test_mps_is_recorded_only_on_nodes_whose_engine_enforces_it():
    shared = dataclasses.replace(node("k", gpus=1, sharing="shared"))
    local = on(shared, "local", mps=True)
    kube = on(dataclasses.replace(shared, name="k2"), "kubernetes")
    config = SchedulerConfig(shared_enforcement=Enforcement.MPS)
    for n, enforced in ((local, Enforcement.MPS), (kube, Enforcement.POLICED)):
        d = cycle(snapshot([n], TENANTS), [job("f", fraction=0.5)], NOW, config)
        assert d.admissions[0].allocation.shares[0].enforcement is enforced


def test_pinned_guaranteed_work_reserves_a_node_of_its_engine():
    tenants = [tenant("lab-a", 8), tenant("lab-b", 0)]
    run = [
        running(job(f"b{i}", "lab-b", "bob", gpus=1, preemptible=False), KUBE, [i])
        for i in range(7)
    ]
    run += [
        running(job(f"s{i}", "lab-b", "bob", gpus=4, preemptible=False), s, range(4))
        for i, s in enumerate(SLURM)
    ]
    d = cycle(snapshot(POOL, tenants, run), [pin(job("k", gpus=2), "kubernetes")], NOW)
    assert d.pending["k"].wait is not None and d.pending["k"].wait.node == "kube-0"


def test_request_pins_are_checked_and_sorted():
    w = pin(job("x"), "slurm", zone="a", rack="r1")
    assert w.request.node_labels == (("rack", "r1"), ("zone", "a"))
    for bad in (
        {"engine": "Slurm!"},
        {"node_labels": (("bad key", "a"),)},
        {"node_labels": (("k", "a b"),)},
    ):
        try:
            dataclasses.replace(job("x").request, **bad)
        except ValidationError as e:
            assert e.field in ("engine", "node_labels")
        else:
            raise AssertionError(f"accepted {bad}")


# -- the cache keeps the decisions of a fresh cycle with engines, pins and relabelled nodes --


@st.composite
def mixed(draw):
    engines = ["local", "slurm", "kubernetes", None]
    nodes = []
    for i in range(draw(st.integers(2, 4))):
        n = node(
            f"n{i}",
            gpus=draw(st.integers(1, 3)),
            sharing=draw(st.sampled_from(["exclusive", "shared"])),
        )
        e = draw(st.sampled_from(engines))
        if e is not None:
            n = on(n, e, multi=draw(st.booleans()), zone=draw(st.sampled_from(["a", "b"])))
        nodes.append(n)
    work = []
    for i in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["whole", "frac", "cpu", "gang"]))
        kw: dict = {"tenant": draw(st.sampled_from(["t0", "t1"])), "submit": float(i)}
        if kind in ("whole", "gang"):
            kw["gpus"] = 2 if kind == "gang" else draw(st.integers(1, 2))
        elif kind == "frac":
            kw["fraction"] = 0.5
        w = job(f"w{i}", **kw)
        w = pin(
            w,
            draw(st.sampled_from(["local", "slurm", "kubernetes", None, None])),
            2 if kind == "gang" else 1,
            **({"zone": draw(st.sampled_from(["a", "b"]))} if draw(st.booleans()) else {}),
        )
        work.append(w)
    tenants = [tenant("t0", draw(st.integers(0, 3))), tenant("t1", draw(st.integers(0, 2)))]
    return snapshot(nodes, tree(*tenants)), work


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mixed(),
    st.lists(
        st.tuples(st.sampled_from(["none", "relabel", "finish"]), st.integers(0, 9)),
        min_size=1,
        max_size=5,
    ),
)
def test_a_kept_cache_decides_as_a_fresh_cycle_with_engines(scenario, steps):
    snap, pending = scenario
    cache = SchedulerCache()
    config = SchedulerConfig(reclaim_after_s=0, min_runtime_s=0)
    now = 0.0
    for what, k in [*steps, ("none", 0)]:
        d = cycle(snap, pending, now, config, cache)
        assert d == cycle(snap, pending, now, config)
        allowed = {n.name: n.label_map for n in snap.nodes}
        by_id = {w.id: w for w in pending}
        for a in d.admissions:
            r = by_id[a.workload_id].request
            engines = {allowed[x].get(ENGINE_LABEL) for x in a.allocation.nodes}
            assert len(engines - {None}) <= 1  # one engine per gang
            for x in a.allocation.nodes:
                labels = allowed[x]
                assert r.engine is None or labels.get(ENGINE_LABEL) in (None, r.engine)
                assert all(labels.get(key) == v for key, v in r.node_labels)
                if r.nodes > 1 and ENGINE_LABEL in labels:
                    assert labels.get(MULTI_NODE_LABEL) == "true"
        snap, pending = apply(snap, pending, d, now)
        nodes = list(snap.nodes)
        i = k % len(nodes)
        if what == "relabel":
            nodes[i] = on(nodes[i], ["local", "slurm"][k % 2], multi=bool(k % 3), zone="ab"[k % 2])
        elif what == "finish" and snap.running:
            snap = dataclasses.replace(snap, running=snap.running[1:])
        snap = dataclasses.replace(snap, nodes=tuple(nodes))
        now += 100.0


def test_a_gang_reclaims_borrowed_gpus_on_the_nodes_of_one_engine():
    # three multi-node nodes of one GPU each, all borrowed by lab-b; kube-1's work is the
    # newest (the cheapest victim), but a gang of 2 x 1 runs on one engine: the slurm pair
    slurm = [on(node(f"s{i}", gpus=1), "slurm", multi=True) for i in range(2)]
    kube = on(node("k", gpus=1), "kubernetes", multi=True)
    tenants = [tenant("lab-a", 2), tenant("lab-b", 0)]
    run = [
        running(job("bs0", "lab-b", "bob", gpus=1), slurm[0], [0], since=100.0),
        running(job("bs1", "lab-b", "bob", gpus=1), slurm[1], [0], since=200.0),
        running(job("bk", "lab-b", "bob", gpus=1), kube, [0], since=900.0),
    ]
    config = SchedulerConfig(reclaim_after_s=0, min_runtime_s=0)
    gang = pin(job("g", gpus=2), nodes=2)
    snap = snapshot([*slurm, kube], tenants, run)
    d = cycle(snap, [gang], NOW, config)
    assert sorted(p.workload_id for p in d.preemptions) == ["bs0", "bs1"]
    snap, pending = apply(snap, [gang], d, NOW)
    d = cycle(snap, pending, NOW + 1, config)
    assert sorted(where(d, "g")) == ["s0", "s1"]
