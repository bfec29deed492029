"""Node pool metrics (issue 34), computed at scrape time from the store:
`gpupool_node_pool_nodes` by `pool` and `state` (up, requested, booting, powered_down; every
state of every pool, 0 included, so a dashboard's stacked graph has no gaps),
`gpupool_node_pool_requests_in_flight` and `gpupool_node_pool_nodes_requested` (the open
requests for nodes, and the nodes they ask for) and `gpupool_node_pool_max_nodes`, by `pool`."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.domain.nodepools import PoolNodeState
from gpupool.store import NodePoolRepo, Store

log = logging.getLogger(__name__)


class NodePoolCollector(Collector):
    def __init__(self, store: Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        nodes = GaugeMetricFamily(
            "gpupool_node_pool_nodes", "Nodes of the pool by state", labels=["pool", "state"]
        )
        in_flight = GaugeMetricFamily(
            "gpupool_node_pool_requests_in_flight",
            "Requests for nodes of the pool not yet fulfilled or withdrawn",
            labels=["pool"],
        )
        asked = GaugeMetricFamily(
            "gpupool_node_pool_nodes_requested",
            "Nodes the pool's open requests ask for",
            labels=["pool"],
        )
        most = GaugeMetricFamily(
            "gpupool_node_pool_max_nodes", "The most nodes the pool may have", labels=["pool"]
        )
        try:
            with self.store.read() as s:
                repo = NodePoolRepo(s)
                pools = repo.list()
                members = repo.nodes() if pools else []
                reqs = repo.requests() if pools else []
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the node pools failed")
            return
        for p in pools:
            for state in PoolNodeState:
                n = sum(1 for m in members if m.pool == p.name and m.state is state)
                nodes.add_metric([p.name, str(state)], n)
            mine = [r for r in reqs if r.pool == p.name]
            in_flight.add_metric([p.name], len(mine))
            asked.add_metric([p.name], sum(r.count for r in mine))
            most.add_metric([p.name], p.max_nodes)
        yield from (nodes, in_flight, asked, most)
