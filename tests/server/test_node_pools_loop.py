"""Node pools end to end on the fake engine (issue 34): work that waits for capacity makes
the autoscale loop ask for a node, the node boots on the clock, joins the inventory and
runs the work; idle, it is given back after the pool's idle_seconds; a request the cloud
never fulfils is withdrawn after its timeout and the waiting work's reason says so."""

from __future__ import annotations

from gpupool.domain import NodeState
from gpupool.domain.nodepools import PoolNodeState, RequestState
from gpupool.engines.fake.engine import FakeEngine
from gpupool.server.loops.autoscale import AutoscaleLoop
from gpupool.server.loops.inventory import InventoryLoop
from gpupool.store import NodePoolRepo, NodeRepo, WorkloadRepo
from tests.pools import h100_pool

POOL = h100_pool(engine="fake", max_nodes=2, idle_seconds=600, request_timeout_seconds=1200)


def _setup(world, pool=POOL):
    with world.ctx.store.write() as s:
        NodePoolRepo(s).save(pool, create=True)
    loop = world.ctx.loops.get("autoscale")
    assert isinstance(loop, AutoscaleLoop)
    return loop


def _workload(world, wid):
    with world.ctx.store.read() as s:
        return WorkloadRepo(s).get(wid)


def _why(world, wid) -> str:
    r = world.get("admin", f"/workloads/{wid}")
    assert r.status_code == 200, r.text
    return (r.json().get("pending") or {}).get("reason") or ""


def test_a_node_is_asked_for_boots_runs_the_work_and_goes_back_when_idle(world):
    loop = _setup(world)
    ann1 = world.submit("member", gpus=3)  # lab: admitted on n1
    otto = world.submit("outsider", gpus=2)  # other: 1 whole GPU left; waits for capacity
    ann2 = world.submit("member", gpus=1)  # lab is at its limit of 3: no node for it
    world.scheduler.run_once()
    assert _workload(world, ann1["id"]).state == "running"
    why = _why(world, otto["id"])
    assert why.startswith("waiting for a node of pool gpu-h100 (requested, ~4 min)"), why
    assert "pool" not in _why(world, ann2["id"])

    loop.run_once()
    cloud = world.executor.cloud
    assert [c[0] for c in cloud.calls] == ["request"]
    with world.ctx.store.read() as s:
        (req,) = NodePoolRepo(s).requests()
    assert (req.count, req.for_workloads) == (1, (otto["id"],))
    loop.run_once()  # nothing new: the open request covers it
    assert len(cloud.calls) == 1

    world.clock.advance(60)
    loop.run_once()
    world.scheduler.run_once()
    assert "(booting, ~3 min)" in _why(world, otto["id"])

    world.clock.advance(180)
    loop.run_once()
    with world.ctx.store.read() as s:
        (node,) = NodePoolRepo(s).nodes()
        assert NodePoolRepo(s).requests() == []  # fulfilled
    assert node.state is PoolNodeState.UP
    # the engine's inventory loop registers it (the fake engine has none of its own)
    InventoryLoop(world.ctx, FakeEngine(world.executor)).run_once()
    world.scheduler.run_once()
    w = _workload(world, otto["id"])
    assert w.state == "running", w.reason
    with world.ctx.store.read() as s:
        from gpupool.store import AllocationRepo

        (alloc,) = [r.allocation for r in AllocationRepo(s).running() if r.workload.id == w.id]
    assert alloc.node == node.name

    world.executor.finish(otto["id"])
    world.ctx.loops.get("reconciler").run_once()
    loop.run_once()  # idle from now
    world.clock.advance(599)
    loop.run_once()
    assert [c[0] for c in cloud.calls] == ["request"]
    world.clock.advance(1)
    loop.run_once()
    assert cloud.calls[-1] == ("release", node.name)
    with world.ctx.store.read() as s:
        assert NodePoolRepo(s).nodes()[0].state is PoolNodeState.POWERED_DOWN
        assert NodeRepo(s).get(node.name).state is NodeState.DOWN


def test_a_request_never_fulfilled_is_withdrawn_with_the_reason_and_not_repeated_at_once(world):
    loop = _setup(world)
    world.executor.cloud.out_of_capacity.add("gpu-h100")
    world.submit("member", gpus=3)
    otto = world.submit("outsider", gpus=2)
    world.scheduler.run_once()
    loop.run_once()
    world.clock.advance(1200)
    loop.run_once()
    cloud = world.executor.cloud
    assert [c[0] for c in cloud.calls] == ["request", "withdraw"]
    with world.ctx.store.read() as s:
        (req,) = NodePoolRepo(s).requests(open_only=False)
    assert req.state is RequestState.WITHDRAWN
    assert "not fulfilled within 20 min and was withdrawn" in req.reason
    world.scheduler.run_once()
    why = _why(world, otto["id"])
    assert "was withdrawn" in why and "asks again" in why, why
    loop.run_once()
    assert len(cloud.calls) == 2  # not asked again at once
    world.clock.advance(1200)
    world.scheduler.run_once()
    loop.run_once()
    assert cloud.calls[-1][0] == "request"  # asked again after the pause


def test_without_pools_the_loop_does_nothing(world):
    loop = world.ctx.loops.get("autoscale")
    world.submit("outsider", gpus=2)
    world.scheduler.run_once()
    assert loop.run_once() is None
    assert world.executor.cloud.calls == []


def test_work_only_a_pools_node_could_hold_is_accepted_and_asks_for_one(world):
    import dataclasses

    loop = _setup(world, dataclasses.replace(POOL, memory_mib=1_000_000))
    body = {"gpus": 2, "memory_mib": 800_000, "command": ["train"]}
    r = world.post("outsider", "/workloads", json=body)
    assert r.status_code == 201, r.text  # n1 has 512000 MiB; a node of gpu-h100 1000000
    world.scheduler.run_once()
    assert _workload(world, r.json()["id"]).state == "pending"
    assert "waiting for a node of pool gpu-h100" in _why(world, r.json()["id"])
    loop.run_once()
    assert world.executor.cloud.calls[0][0] == "request"
    r = world.post("outsider", "/workloads", json={**body, "memory_mib": 2_000_000})
    assert r.status_code == 422 and "can never run" in r.text  # no pool's node has that
