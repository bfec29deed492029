"""Node pools in the store (issue 34): pools, their nodes' states and requests round-trip on
SQLite and PostgreSQL; a pool with live nodes is not deleted."""

import pytest

from gpupool.domain.nodepools import NodePool, NodeRequest, PoolNode, PoolNodeState, RequestState
from gpupool.store import Conflict, NodePoolRepo, NotFound

POOL = NodePool(
    "gpu-h100",
    gpus=8,
    gpu_model="H100",
    cpu_milli=96_000,
    memory_mib=1_000_000,
    labels=(("cloud", "aws"),),
    engine="fake",
    min_nodes=1,
    max_nodes=4,
    boot_seconds=240,
    cost_per_gpu_hour=2.5,
    idle_seconds=900,
    request_timeout_seconds=1200,
)


def test_pools_round_trip_update_and_delete(store):
    with store.write() as s:
        NodePoolRepo(s).save(POOL, create=True)
        with pytest.raises(Conflict, match="already exists"):
            NodePoolRepo(s).save(POOL, create=True)
    with store.read() as s:
        assert NodePoolRepo(s).list() == [POOL]
    bigger = NodePool(
        **{**{f: getattr(POOL, f) for f in POOL.__dataclass_fields__}, "max_nodes": 9}
    )
    with store.write() as s:
        NodePoolRepo(s).save(bigger, create=False)
    with store.read() as s:
        assert NodePoolRepo(s).get("gpu-h100").max_nodes == 9
    with store.write() as s:
        NodePoolRepo(s).delete("gpu-h100")
    with store.read() as s, pytest.raises(NotFound, match="GET /api/v1/node-pools"):
        NodePoolRepo(s).get("gpu-h100")


def test_nodes_and_requests_round_trip_and_block_deleting_a_pool_in_use(store):
    node = PoolNode("h100-1", "gpu-h100", PoolNodeState.BOOTING, since=5.0)
    req = NodeRequest("r1", "gpu-h100", 2, ("w1", "w2"), 5.0, atomic=True, engine_ref="pr-1")
    with store.write() as s:
        repo = NodePoolRepo(s)
        repo.save(POOL, create=True)
        repo.put_node(node)
        repo.put_request(req)
    with store.read() as s:
        assert NodePoolRepo(s).nodes() == [node]
        assert NodePoolRepo(s).requests() == [req]
    with store.write() as s, pytest.raises(Conflict, match="h100-1"):
        NodePoolRepo(s).delete("gpu-h100")
    ended = NodeRequest(
        "r1",
        "gpu-h100",
        2,
        ("w1", "w2"),
        5.0,
        RequestState.WITHDRAWN,
        True,
        "pr-1",
        "timed out",
        9.0,
    )
    with store.write() as s:
        NodePoolRepo(s).put_node(node.moved(PoolNodeState.POWERED_DOWN, 9.0))
        NodePoolRepo(s).put_request(ended)
    with store.read() as s:
        assert NodePoolRepo(s).requests() == []
        assert NodePoolRepo(s).requests(open_only=False) == [ended]
    with store.write() as s:
        NodePoolRepo(s).delete("gpu-h100")
    with store.read() as s:
        assert NodePoolRepo(s).nodes() == []


def test_a_node_of_an_unknown_pool_is_refused(store):
    with store.write() as s, pytest.raises(NotFound, match="no node pool 'nope'"):
        NodePoolRepo(s).put_node(PoolNode("n", "nope", PoolNodeState.UP))
