"""Node pools in the scheduler (issue 34): demand only for work that waits for capacity, the
fewest nodes of the cheapest pool that serves it, a gang's nodes atomic, idle nodes given
back above min_nodes, requests withdrawn after their timeout with the reason saying so."""

import dataclasses

from gpupool.domain import Request
from gpupool.domain.nodepools import NodeRequest, PoolNode, PoolNodeState
from gpupool.domain.placement import ENGINE_LABEL
from gpupool.scheduler import cycle
from gpupool.scheduler.autoscale import (
    PoolView,
    ScaleDown,
    ScaleUp,
    capacity_bound,
    plan,
    rescue,
)
from gpupool.scheduler.types import Policy
from tests.pools import h100_pool
from tests.scheduler.builders import job, node, running, snapshot, tenant

P = PoolNodeState
H100 = h100_pool(
    cpu_milli=96_000,
    memory_mib=1_000_000,
    cost_per_gpu_hour=4.0,
    idle_seconds=600,
    request_timeout_seconds=1200,
)


def waiting_for(snap, pending, held=()):
    d = cycle(snap, pending, 100.0)
    return d, capacity_bound(snap, pending, d, held)


def test_only_work_that_waits_for_capacity_makes_demand():
    n = node("n1", gpus=4)
    snap = snapshot(
        [n],
        [tenant("lab-a", limit=4), tenant("lab-b", limit=1)],
        [running(job("r1", tenant="lab-b", gpus=1), n, [0])],
    )
    pending = [
        job("fits", gpus=1, submit=1),  # admitted
        job("big", gpus=3, submit=2),  # 2 GPUs are left: it waits for capacity
        job("over-limit", tenant="lab-b", gpus=1, submit=3),  # lab-b is at its limit of 1
        job("budget", gpus=3, submit=4),  # the caller holds it back (a budget)
    ]
    d, waiting = waiting_for(snap, pending, held={"budget"})
    assert [a.workload_id for a in d.admissions] == ["fits"]
    assert [w.id for w in waiting] == ["big"]
    p = plan([PoolView(H100)], waiting, (), 100.0)
    assert p.scale_up == (ScaleUp("gpu-h100", 1, ("big",)),)
    assert p.reasons["big"].startswith("waiting for a node of pool gpu-h100 (requested, ~4 min)")
    assert "over-limit" not in p.reasons


def test_work_that_fits_the_free_capacity_waits_its_turn_without_demand():
    snap = snapshot([node("n1", gpus=2)], [tenant("lab-a")])
    pending = [job("a", gpus=1, submit=1)]
    d = cycle(snap, pending, 100.0)
    # the caller capped this cycle's admissions: it fits, so it waits for its turn only
    d = dataclasses.replace(d, admissions=(), pending={"a": d.pending.get("a") or _info()})
    assert capacity_bound(snap, pending, d) == []


def _info():
    from gpupool.scheduler.types import PendingInfo

    return PendingInfo("behind others", 1, 1)


def test_the_fewest_nodes_are_asked_for_and_the_cheapest_pool_first():
    cheap = dataclasses.replace(H100, name="spot-h100", cost_per_gpu_hour=1.0, max_nodes=1)
    waiting = [job(f"w{i}", gpus=3, submit=i) for i in range(5)]  # 15 GPUs: 2 nodes of 8
    p = plan([PoolView(H100), PoolView(cheap)], waiting, (), 0.0)
    # spot first (cheapest) up to its max of 1 node (2 jobs of 3), the rest on gpu-h100
    assert p.scale_up == (
        ScaleUp("spot-h100", 1, ("w0", "w1")),
        ScaleUp("gpu-h100", 2, ("w2", "w3", "w4")),
    )


def test_a_gang_is_one_atomic_request_or_none():
    gang = dataclasses.replace(job("g", gpus=16), request=Request(gpus=16, nodes=2))
    p = plan([PoolView(H100)], [gang], (), 0.0)
    assert p.scale_up == (ScaleUp("gpu-h100", 2, ("g",), atomic=True),)
    small = dataclasses.replace(H100, max_nodes=1)
    p = plan([PoolView(small)], [gang], (), 0.0)
    assert p.scale_up == ()
    assert "at its maximum of 1 nodes" in p.reasons["g"]


def test_shapes_no_pool_serves_make_no_demand():
    waiting = [job("a100", gpus=1, model="A100"), job("huge", gpus=9), job("ram", memory_gib=5000)]
    p = plan([PoolView(H100)], waiting, (), 0.0)
    assert p.scale_up == () and p.reasons == {}


def test_a_pool_at_its_maximum_asks_for_nothing_more():
    up = tuple(PoolNode(f"h{i}", "gpu-h100", P.UP) for i in range(3))
    req = NodeRequest("r1", "gpu-h100", 1, ("old",), requested_at=0.0)
    waiting = [job("old", gpus=8), job("new", gpus=8)]
    p = plan([PoolView(H100, up, (req,))], waiting, (), 10.0)
    assert p.scale_up == ()
    assert "at its maximum of 4 nodes" in p.reasons["new"]
    # a node on its way that the work it was asked for no longer needs takes new work
    p = plan([PoolView(H100, up, (req,))], waiting[1:], (), 10.0)
    assert p.scale_up == ()
    assert p.reasons["new"].startswith("waiting for a node of pool gpu-h100 (requested")


def test_work_shares_a_node_on_its_way_before_another_is_asked_for():
    req = NodeRequest("r1", "gpu-h100", 1, ("a",), requested_at=0.0)
    waiting = [job("a", gpus=4), job("b", gpus=4), job("c", gpus=8)]
    p = plan([PoolView(H100, (), (req,))], waiting, (), 60.0)
    assert p.scale_up == (ScaleUp("gpu-h100", 1, ("c",)),)
    assert "(requested, ~3 min)" in p.reasons["b"]


def test_work_covered_by_an_open_request_says_booting_and_is_not_asked_for_again():
    nodes = (PoolNode("h0", "gpu-h100", P.BOOTING, since=0.0),)
    req = NodeRequest("r1", "gpu-h100", 1, ("w",), requested_at=0.0)
    p = plan([PoolView(H100, nodes, (req,))], [job("w", gpus=8)], (), 60.0)
    assert p.scale_up == () and p.withdrawals == ()
    assert p.reasons["w"].startswith("waiting for a node of pool gpu-h100 (booting, ~3 min)")


def test_a_request_not_fulfilled_in_time_is_withdrawn_and_the_reason_says_so():
    req = NodeRequest("r1", "gpu-h100", 1, ("w",), requested_at=0.0)
    p = plan([PoolView(H100, (), (req,))], [job("w", gpus=8)], (), 1200.0)
    assert [x.request for x in p.withdrawals] == ["r1"]
    assert p.scale_up == ()  # not asked again at once: it would never end
    assert "not fulfilled within 20 min and was withdrawn" in p.reasons["w"]
    # while the pool's last request timed out recently, nothing is asked of it
    later = plan([PoolView(H100, withdrawn_at=1200.0)], [job("w", gpus=8)], (), 1300.0)
    assert later.scale_up == () and "asks again" in later.reasons["w"]
    # after that, it is asked again
    again = plan([PoolView(H100, withdrawn_at=1200.0)], [job("w", gpus=8)], (), 2400.0)
    assert again.scale_up == (ScaleUp("gpu-h100", 1, ("w",)),)


def test_idle_nodes_go_back_after_idle_seconds_never_below_min_nodes():
    pool = dataclasses.replace(H100, min_nodes=1)
    nodes = (
        PoolNode("h0", "gpu-h100", P.UP, idle_since=0.0),
        PoolNode("h1", "gpu-h100", P.UP, idle_since=100.0),
        PoolNode("h2", "gpu-h100", P.UP, idle_since=500.0),
        PoolNode("h3", "gpu-h100", P.UP, idle_since=None),  # runs work
    )
    p = plan([PoolView(pool, nodes)], [], (), 700.0)
    assert p.scale_down == (ScaleDown("gpu-h100", "h0", 0.0), ScaleDown("gpu-h100", "h1", 100.0))
    # a node gpupool sees work on is never given back, whatever its idle_since says
    assert plan([PoolView(pool, nodes)], [], {"h0"}, 700.0).scale_down[0].node == "h1"
    # above min_nodes only
    two = plan([PoolView(dataclasses.replace(pool, min_nodes=3), nodes)], [], (), 5000.0)
    assert [d.node for d in two.scale_down] == ["h0"]
    # nothing goes back while work waits that the pool serves
    assert plan([PoolView(pool, nodes)], [job("w", gpus=8)], (), 700.0).scale_down == ()


def test_a_pool_serves_only_what_feasibility_says_its_nodes_could_hold():
    """Pool nodes come with exclusive GPUs: a fraction no present node can hold is failed
    with the scheduler's reason, and no node is bought for it (under `fifo` it takes a
    whole GPU, and a pool's node holds it); a gang of more nodes than the pool may have
    is failed too, where no present node helps it."""
    snap = snapshot([node("n1", gpus=0)], [tenant("lab-a")])
    frac = job("frac", fraction=0.5)
    gang = dataclasses.replace(job("gang", gpus=40), request=Request(gpus=40, nodes=5))
    pending = [frac, gang]
    d = cycle(snap, pending, 100.0)
    assert set(d.unschedulable) == {"frac", "gang"}
    fair = rescue(d, pending, [H100], snap.tenants, Policy.FAIR)
    assert set(fair.unschedulable) == {"frac", "gang"}
    assert plan([PoolView(H100)], [frac], (), 100.0).scale_up == ()
    fifo = rescue(d, pending, [H100], snap.tenants, Policy.FIFO)
    assert set(fifo.unschedulable) == {"gang"} and "frac" in fifo.pending
    assert plan([PoolView(H100)], [frac], (), 100.0, policy=Policy.FIFO).scale_up == (
        ScaleUp("gpu-h100", 1, ("frac",)),
    )


def test_work_that_fits_only_on_paper_still_makes_demand():
    """Whether waiting work would fit what is free is the scheduler's placement: free nodes
    of an engine that runs no multi-node work do not hold a gang, so it waits for a pool's
    nodes and they are asked for."""
    local = [dataclasses.replace(node(f"n{i}"), labels=((ENGINE_LABEL, "local"),)) for i in (1, 2)]
    snap = snapshot(local, [tenant("lab-a")])
    gang = dataclasses.replace(job("g", gpus=16), request=Request(gpus=16, nodes=2))
    d = rescue(cycle(snap, [gang], 100.0), [gang], [H100], snap.tenants, Policy.FAIR)
    waiting = capacity_bound(snap, [gang], d)
    assert waiting == [gang]
    assert plan([PoolView(H100)], waiting, (), 100.0).scale_up == (
        ScaleUp("gpu-h100", 2, ("g",), atomic=True),
    )
