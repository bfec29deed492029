"""The fake engine's node pools: a scriptable cloud on the injected clock (issue 34).

`FakeCloud` lives in the `FakeWorld` (it outlives an executor, as a cloud outlives a
restarted server). A request for `count` nodes of a pool names them `<pool>-<n>` (powered-down
nodes the test declared with `power_down` first, as Slurm's `CLOUD` nodes), keeps them
`requested` for `accept_s`, `booting` until the pool's `boot_seconds` have passed since the
request, then `up`: they join the fake engine's inventory with the pool's shape and
`POOL_LABEL`. Pools in `out_of_capacity` accept requests and never fulfil them (the timeout
path). `release_node` powers a node down; `withdraw` drops the nodes of a request not yet up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupool.clock import Clock
from gpupool.domain import Node, Workload
from gpupool.domain.nodepools import NodePool, PoolNodeState, RequestState
from gpupool.domain.placement import ENGINE_LABEL
from gpupool.engines.common.executor import (
    ExecutorWithNodePools,
    NodeRequestStatus,
    PoolNodeStatus,
    PoolStates,
)

P = PoolNodeState


@dataclass
class FakeCloudRequest:
    id: str
    pool: NodePool
    nodes: list[str]
    at: float
    for_workloads: tuple[str, ...]
    atomic: bool
    state: RequestState = RequestState.OPEN


@dataclass
class FakeCloud:
    """The fake engine's nodes of pools and the requests made to it."""

    #: seconds a request stays `requested` before its nodes boot
    accept_s: float = 0.0
    #: pools whose requests are never fulfilled
    out_of_capacity: set[str] = field(default_factory=set)
    requests: dict[str, FakeCloudRequest] = field(default_factory=dict)
    #: node -> (pool, state)
    nodes: dict[str, tuple[NodePool, PoolNodeState]] = field(default_factory=dict)
    #: every call, in order: ("request", id, count) / ("withdraw", id) / ("release", node)
    calls: list[tuple[object, ...]] = field(default_factory=list)
    next_id: int = 1

    def power_down(self, pool: NodePool, *names: str) -> None:
        """Declare powered-down nodes of `pool` (as Slurm's `State=CLOUD` nodes)."""
        for n in names:
            self.nodes[n] = (pool, P.POWERED_DOWN)

    def advance(self, now: float) -> None:
        """Move requests on to `now`: requested -> booting -> up."""
        for r in self.requests.values():
            if r.state is not RequestState.OPEN or r.pool.name in self.out_of_capacity:
                continue
            for n in r.nodes:
                pool, state = self.nodes[n]
                if state is P.REQUESTED and now - r.at >= self.accept_s:
                    state = P.BOOTING
                if state is P.BOOTING and now - r.at >= r.pool.boot_seconds:
                    state = P.UP
                self.nodes[n] = (pool, state)
            if all(self.nodes[n][1] is P.UP for n in r.nodes):
                r.state = RequestState.FULFILLED

    def up_nodes(self) -> list[Node]:
        """The nodes that are up, as the inventory lists them."""
        return [node_of(pool, n) for n, (pool, s) in sorted(self.nodes.items()) if s is P.UP]


def node_of(pool: NodePool, name: str) -> Node:
    """A node of `pool`'s shape named `name`, labelled with its pool (and engine)."""
    return pool.node(name, ((ENGINE_LABEL, "fake"),))


class FakeNodePools(ExecutorWithNodePools):
    """`ExecutorWithNodePools` over the world's `FakeCloud` (the fake executors' power)."""

    clock: Clock

    @property
    def cloud(self) -> FakeCloud:
        """The cloud it acts on (the fake executors': their world's)."""
        raise NotImplementedError

    def request_nodes(
        self, pool: NodePool, count: int, for_workloads: Sequence[Workload], *, atomic: bool
    ) -> str:
        c = self.cloud
        rid = f"fake-req-{c.next_id}"
        c.next_id += 1
        spare = sorted(
            n for n, (p, s) in c.nodes.items() if p.name == pool.name and s is P.POWERED_DOWN
        )
        names = spare[:count]
        k = len(c.nodes)
        while len(names) < count:
            k += 1
            name = f"{pool.name}-{k}"
            if name not in c.nodes:
                names.append(name)
        for n in names:
            c.nodes[n] = (pool, P.REQUESTED)
        ids = tuple(w.id for w in for_workloads)
        c.requests[rid] = FakeCloudRequest(rid, pool, names, self.clock.now(), ids, atomic)
        c.calls.append(("request", rid, count))
        return rid

    def withdraw(self, request: str) -> None:
        c = self.cloud
        c.calls.append(("withdraw", request))
        r = c.requests.get(request)
        if r is None or r.state is not RequestState.OPEN:
            return
        r.state = RequestState.WITHDRAWN
        for n in r.nodes:
            pool, state = c.nodes[n]
            if state is not P.UP:
                c.nodes[n] = (pool, P.POWERED_DOWN)

    def release_node(self, node: str) -> None:
        c = self.cloud
        c.calls.append(("release", node))
        if node in c.nodes:
            c.nodes[node] = (c.nodes[node][0], P.POWERED_DOWN)

    def pool_states(self, pools: Sequence[NodePool]) -> PoolStates:
        c = self.cloud
        c.advance(self.clock.now())
        names = {p.name for p in pools}
        of_request = {n: r.id for r in c.requests.values() for n in r.nodes}
        nodes = tuple(
            PoolNodeStatus(n, p.name, s, of_request.get(n, ""))
            for n, (p, s) in sorted(c.nodes.items())
            if p.name in names
        )
        reqs = tuple(
            NodeRequestStatus(r.id, r.pool.name, r.state)
            for r in c.requests.values()
            if r.pool.name in names
        )
        return PoolStates(nodes, reqs)
