"""A real Prometheus scrapes the node pools' series (issue 34 part 5): nodes per pool and
state (0 for a state no node is in), requests in flight and the nodes they ask for."""

from __future__ import annotations

import httpx
import pytest

from gpupool.domain.nodepools import NodePool, NodeRequest, PoolNode, PoolNodeState, RequestState
from gpupool.store import NodePoolRepo
from tests.pools import h100_pool
from tests.server.test_prometheus import Cluster, Prometheus, pytestmark  # noqa: F401
from tests.support import ServedApp, wait_for

P = PoolNodeState
POOL = h100_pool()


@pytest.fixture
def served_pools(tmp_path):
    cluster = Cluster(tmp_path)
    now = cluster.clock.now()
    with cluster.store.write() as s:
        repo = NodePoolRepo(s)
        repo.save(POOL, create=True)
        repo.save(NodePool("cpu", gpus=0, cpu_milli=8000, memory_mib=32_000), create=True)
        repo.put_node(PoolNode("h100-1", "gpu-h100", P.UP, now, now))
        repo.put_node(PoolNode("h100-2", "gpu-h100", P.BOOTING, now))
        repo.put_node(PoolNode("h100-3", "gpu-h100", P.POWERED_DOWN, now))
        repo.put_request(NodeRequest("req-1", "gpu-h100", 2, ("w-1",), now, atomic=True))
        repo.put_request(
            NodeRequest("req-0", "gpu-h100", 1, ("w-0",), now - 600, RequestState.WITHDRAWN)
        )
    with ServedApp(cluster.app) as url:
        yield url
    cluster.store.close()


def _series(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            out[labels] = float(value)
    return out


def test_prometheus_sees_the_pools_nodes_by_state_and_the_requests_in_flight(
    served_pools, tmp_path
):
    text = httpx.get(f"{served_pools}/metrics").text
    nodes = _series(text, "gpupool_node_pool_nodes")
    assert nodes['{pool="gpu-h100",state="up"}'] == 1
    assert nodes['{pool="gpu-h100",state="booting"}'] == 1
    assert nodes['{pool="gpu-h100",state="powered_down"}'] == 1
    assert nodes['{pool="gpu-h100",state="requested"}'] == 0
    assert nodes['{pool="cpu",state="up"}'] == 0
    flight = _series(text, "gpupool_node_pool_requests_in_flight")
    assert flight == {'{pool="cpu"}': 0, '{pool="gpu-h100"}': 1}  # the withdrawn one is not
    assert _series(text, "gpupool_node_pool_nodes_requested")['{pool="gpu-h100"}'] == 2
    assert _series(text, "gpupool_node_pool_max_nodes")['{pool="gpu-h100"}'] == 4
    prom = Prometheus(tmp_path, served_pools.removeprefix("http://"))
    try:
        res = wait_for(
            lambda: prom.query("sum by (state) (gpupool_node_pool_nodes)"),
            "Prometheus to scrape the node pools",
            timeout=30,
        )
        by_state = {r["metric"]["state"]: r["value"][1] for r in res}
        assert by_state == {"up": "1", "booting": "1", "powered_down": "1", "requested": "0"}
        (res,) = prom.query('gpupool_node_pool_requests_in_flight{pool="gpu-h100"}')
        assert res["value"][1] == "1"
    finally:
        prom.stop()
