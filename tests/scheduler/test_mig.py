"""MIG in the scheduler: instances of a GPU's layout are placed one by one, held whole, and
a waiting MIG request says which starts its profile needs."""

from __future__ import annotations

import dataclasses

from gpupool.domain import GPU, Enforcement, Node, Request, SharingMode, Workload
from gpupool.scheduler import cycle
from tests.scheduler.builders import GIB, apply, snapshot, tenant


def mig_node(name: str = "a", layouts: tuple[str | None, ...] = ("all-1g.10gb",)) -> Node:
    gpus = tuple(
        GPU(i, f"{name}-gpu{i}", "H100", 80 * GIB, SharingMode.MIG, mig_layout=lay)
        for i, lay in enumerate(layouts)
    )
    return Node(name, gpus, cpu_milli=64_000, memory_mib=512 * GIB)


def mig_job(id: str, profile: str | None, submit: float = 0, **req) -> Workload:
    return Workload(
        id=id,
        tenant="lab-a",
        owner="alice",
        request=Request(mig=profile, cpu_milli=1000, memory_mib=GIB, **req),
        submitted_at=submit,
    )


def test_seven_1g_instances_then_the_eighth_waits() -> None:
    snap = snapshot([mig_node()], [tenant("lab-a")])
    pending = [mig_job(f"w{i}", "1g.10gb", submit=i) for i in range(8)]
    d = cycle(snap, pending, now=10)
    starts = sorted(a.allocation.shares[0].mig_start for a in d.admissions)
    assert starts == [0, 1, 2, 3, 4, 5, 6]
    for a in d.admissions:
        (s,) = a.allocation.shares
        assert s.mig_profile == "1g.10gb"
        assert s.enforcement is Enforcement.HARDWARE
        assert s.milli == 142
    assert "w7" in d.pending
    assert d.pending["w7"].reason.startswith("no free 1g.10gb: every 1g.10gb instance is in use")


def test_held_instances_stay_held_across_cycles_and_free_when_work_ends() -> None:
    snap = snapshot([mig_node(layouts=("all-3g.40gb",))], [tenant("lab-a")])
    d = cycle(snap, [mig_job("a", "3g.40gb"), mig_job("b", "3g.40gb", submit=1)], now=1)
    assert sorted(a.allocation.shares[0].mig_start for a in d.admissions) == [0, 4]
    snap, left = apply(snap, [mig_job("a", "3g.40gb"), mig_job("b", "3g.40gb", 1)], d, 1)
    d2 = cycle(snap, [mig_job("c", "3g.40gb", submit=2)], now=2)
    assert not d2.admissions
    snap = dataclasses.replace(snap, running=snap.running[1:])  # `a` (start 0) ended
    d3 = cycle(snap, [mig_job("c", "3g.40gb", submit=2)], now=3)
    assert [a.allocation.shares[0].mig_start for a in d3.admissions] == [0]


def test_waiting_reason_names_the_free_slices_and_the_starts_needed() -> None:
    snap = snapshot([mig_node(layouts=("all-1g.10gb",))], [tenant("lab-a")])
    d = cycle(snap, [mig_job("w", "3g.40gb")], now=1)
    why = d.pending["w"].reason
    assert "no free 3g.40gb" in why
    assert "GPU 0 of a has seven free 1g slices, but a 3g needs start 0 or 4" in why


def test_no_gpu_in_mig_mode_is_unschedulable() -> None:
    n = Node("a", (GPU(0, "u0", "H100", 80 * GIB),), 64_000, 512 * GIB)
    d = cycle(snapshot([n], [tenant("lab-a")]), [mig_job("w", "1g.10gb")], now=1)
    assert "no node has GPUs in mig mode" in d.unschedulable["w"]


def test_profile_of_another_model_is_unschedulable() -> None:
    d = cycle(snapshot([mig_node()], [tenant("lab-a")]), [mig_job("w", "1g.5gb")], now=1)
    assert "no GPU in mig mode has that profile" in d.unschedulable["w"]


def test_a_cut_gpu_is_not_handed_out_whole_but_an_uncut_mig_gpu_is() -> None:
    snap = snapshot([mig_node(layouts=("all-1g.10gb", None))], [tenant("lab-a")])
    whole = Workload("g", "lab-a", "alice", Request(gpus=1), submitted_at=0)
    whole2 = Workload("h", "lab-a", "alice", Request(gpus=1), submitted_at=1)
    d = cycle(snap, [whole, whole2], now=1)
    assert [a.allocation.shares[0].gpu_index for a in d.admissions] == [1]
    assert "h" in d.pending


def test_fraction_takes_the_smallest_mig_instance_that_holds_it() -> None:
    snap = snapshot([mig_node(layouts=("all-balanced",))], [tenant("lab-a")])
    frac = Workload(
        "f", "lab-a", "alice", Request(gpu_milli=250, gpu_memory_mib=15 * GIB), submitted_at=0
    )
    d = cycle(snap, [frac], now=1)
    (s,) = d.admissions[0].allocation.shares
    # 1g.10gb is too small (142 milli, 10 GB); 2g.20gb holds 285 milli and ~20 GB
    assert s.mig_profile == "2g.20gb"
    assert s.enforcement is Enforcement.HARDWARE


def test_fraction_prefers_a_shared_gpu_over_a_mig_instance() -> None:
    shared = GPU(1, "a-gpu1", "H100", 80 * GIB, SharingMode.SHARED)
    n = mig_node(layouts=("all-1g.10gb",))
    n = dataclasses.replace(n, gpus=(*n.gpus, shared))
    frac = Workload("f", "lab-a", "alice", Request(gpu_milli=100), submitted_at=0)
    d = cycle(snapshot([n], [tenant("lab-a")]), [frac], now=1)
    (s,) = d.admissions[0].allocation.shares
    assert s.gpu_index == 1 and s.mig_profile is None


def test_mig_request_on_a_model_selects_that_model() -> None:
    a100 = GPU(0, "x0", "A100-SXM4-80GB", 80 * GIB, SharingMode.MIG, mig_layout="all-1g.10gb")
    h100 = GPU(1, "x1", "H100", 80 * GIB, SharingMode.MIG, mig_layout="all-1g.10gb")
    n = Node("a", (a100, h100), 64_000, 512 * GIB)
    d = cycle(snapshot([n], [tenant("lab-a")]), [mig_job("w", "1g.10gb", gpu_model="H100")], 1)
    assert d.admissions[0].allocation.shares[0].gpu_index == 1


# -- idle re-layout (gpupool.scheduler.mig_relayout) ---------------------------------------

from gpupool.scheduler.mig_relayout import plan_relayouts  # noqa: E402


def test_relayout_cuts_an_idle_gpu_for_a_profile_no_layout_has() -> None:
    n = mig_node(layouts=("all-1g.10gb", "all-1g.10gb"))
    pending = [mig_job("big", "3g.40gb")]
    (plan,) = plan_relayouts([n], [], pending)
    assert (plan.gpu_index, plan.layout, plan.for_workload) == (0, "all-3g.40gb", "big")
    assert "idle" in plan.reason


def test_relayout_never_touches_a_gpu_with_running_work() -> None:
    n = mig_node(layouts=("all-1g.10gb", "all-1g.10gb"))
    snap = snapshot([n], [tenant("lab-a")])
    d = cycle(snap, [mig_job("small", "1g.10gb")], now=1)
    snap, _ = apply(snap, [mig_job("small", "1g.10gb")], d, 1)
    busy = d.admissions[0].allocation.shares[0].gpu_index
    plans = plan_relayouts([n], snap.running, [mig_job("a", "3g.40gb"), mig_job("b", "3g.40gb")])
    assert [p.gpu_index for p in plans] == [1 - busy]  # one GPU holds both 3g.40gb requests
    both = [mig_job(f"w{i}", "3g.40gb") for i in range(5)]
    assert [p.gpu_index for p in plan_relayouts([n], snap.running, both)] == [1 - busy]


def test_relayout_plans_nothing_when_a_request_fits_or_nothing_is_idle() -> None:
    n = mig_node(layouts=("all-3g.40gb",))
    assert plan_relayouts([n], [], [mig_job("fits", "3g.40gb")]) == []
    assert plan_relayouts([n], [], [mig_job("other-model", "1g.5gb")]) == []


# -- with preemption and the scheduler cache ----------------------------------------------


def test_guaranteed_mig_request_reclaims_a_borrowed_instance() -> None:
    from gpupool.domain import Quota, Tenant

    n = mig_node(layouts=("all-3g.40gb",))
    tenants = [Tenant("lab-a", Quota.gpus(0)), Tenant("lab-b", Quota.gpus(1))]
    snap = snapshot([n], tenants)
    borrowed = [
        dataclasses.replace(mig_job(f"b{i}", "3g.40gb", submit=i), tenant="lab-a") for i in range(2)
    ]
    d = cycle(snap, borrowed, now=0)
    snap, _ = apply(snap, borrowed, d, 0)
    want = dataclasses.replace(mig_job("g", "3g.40gb", submit=1000), tenant="lab-b", owner="bob")
    d = cycle(snap, [want], now=10_000)
    (victim,) = d.preemptions  # one instance is enough
    freed = next(
        rw.allocation.shares[0].mig_start
        for rw in snap.running
        if rw.workload.id == victim.workload_id
    )
    snap, left = apply(snap, [want], d, 10_000)
    d = cycle(snap, left, now=10_001)
    (a,) = d.admissions
    assert a.workload_id == "g" and a.allocation.shares[0].mig_start == freed


def test_a_layout_change_reaches_a_cached_index() -> None:
    from gpupool.scheduler import SchedulerCache

    cache = SchedulerCache()
    n = mig_node(layouts=("all-1g.10gb",))
    d = cycle(snapshot([n], [tenant("lab-a")]), [mig_job("w", "3g.40gb")], now=1, cache=cache)
    assert not d.admissions
    cut = dataclasses.replace(n, gpus=(dataclasses.replace(n.gpus[0], mig_layout="all-3g.40gb"),))
    d = cycle(snapshot([cut], [tenant("lab-a")]), [mig_job("w", "3g.40gb")], now=2, cache=cache)
    assert d.admissions[0].allocation.shares[0].mig_profile == "3g.40gb"


def test_whole_gpus_no_node_has_stay_unschedulable_beside_mig_gpus() -> None:
    n = mig_node(layouts=("all-1g.10gb", None))
    big = Workload("big", "lab-a", "alice", Request(gpus=3), submitted_at=0)
    d = cycle(snapshot([n], [tenant("lab-a")]), [big], now=1)
    assert "the most any node has is 2" in d.unschedulable["big"]


def test_a_fraction_only_a_mig_profile_could_hold_is_not_unschedulable() -> None:
    n = mig_node(layouts=("all-1g.10gb",))
    frac = Workload("f", "lab-a", "alice", Request(gpu_milli=400), submitted_at=0)
    d = cycle(snapshot([n], [tenant("lab-a")]), [frac], now=1)
    assert "f" not in d.unschedulable and "f" in d.pending  # a 3g/4g layout could hold it
