"""`ExecutorWithNodePools` (issue 34): a request for nodes gets a fresh id and shows in
`pool_states` until it ends; withdrawing it ends it; unknown requests and nodes are no-ops;
`pool_states` reports only the pools it is asked about; the nodes a request asks for come
up in its pool and the request ends fulfilled (where the adapter can let them come:
`EngineUnderTest.bring_up`). (How fast nodes come is the engine's: the fake's cloud on the
clock, Kubernetes' autoscaler, Slurm's ResumeProgram.)"""

from __future__ import annotations

from typing import cast

import pytest

from gpupool.domain.nodepools import NodePool, PoolNodeState, RequestState
from gpupool.engines.common.executor import ExecutorWithNodePools, PoolStates
from tests.engines.contract.adapter import Behaviour
from tests.engines.contract.caps import need

POOL = NodePool(
    "contract-pool",
    gpus=1,
    gpu_model="H100",
    cpu_milli=4000,
    memory_mib=16_384,
    max_nodes=2,
    boot_seconds=60,
    request_timeout_seconds=600,
)


def test_requests_for_nodes_show_until_withdrawn(engine_under_test):
    eut = engine_under_test
    need(eut, "node pools")
    ex = cast(ExecutorWithNodePools, eut.executor)
    wl = eut.workload(eut.id("waits"), Behaviour())
    first = ex.request_nodes(POOL, 1, [wl], atomic=False)
    second = ex.request_nodes(POOL, 1, [wl], atomic=True)
    assert first and second and first != second
    states = ex.pool_states([POOL])
    assert isinstance(states, PoolStates)
    mine = {r.request: r for r in states.requests}
    assert {first, second} <= set(mine)
    assert all(r.pool == POOL.name for r in states.requests)
    assert all(n.pool == POOL.name for n in states.nodes)
    ex.withdraw(first)
    ex.withdraw(first)  # again: a no-op
    after = {r.request: r for r in ex.pool_states([POOL]).requests}
    assert first not in after or after[first].state is not RequestState.OPEN
    ex.withdraw(second)
    ex.withdraw("no-such-request")
    ex.release_node("no-such-node")
    other = NodePool("other-pool", gpus=0, cpu_milli=1000, memory_mib=1024)
    assert ex.pool_states([other]).requests == ()


def test_the_nodes_a_request_asks_for_come_up_in_its_pool(engine_under_test):
    eut = engine_under_test
    need(eut, "node pools")
    if eut.cannot_bring_up:
        pytest.skip(eut.cannot_bring_up)
    ex = cast(ExecutorWithNodePools, eut.executor)
    before = {n.name for n in ex.pool_states([POOL]).nodes if n.state is PoolNodeState.UP}
    rid = ex.request_nodes(POOL, 1, [eut.workload(eut.id("waits"), Behaviour())], atomic=False)
    (asked,) = [r for r in ex.pool_states([POOL]).requests if r.request == rid]
    assert asked.state is RequestState.OPEN, asked  # nothing comes before its time
    eut.bring_up(POOL)
    states = ex.pool_states([POOL])
    (req,) = [r for r in states.requests if r.request == rid]
    assert req.state is RequestState.FULFILLED, req
    new = [n for n in states.nodes if n.state is PoolNodeState.UP and n.name not in before]
    assert len(new) == 1 and new[0].pool == POOL.name, states.nodes
    assert new[0].request in ("", rid)
