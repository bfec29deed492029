"""Node pools (issue 34): admins define, change and delete them; everyone sees them, with
their nodes' states and the requests for nodes in flight (workload ids for admins only)."""

from __future__ import annotations

import dataclasses

from sqlalchemy.orm import Session

from gpupool.api.nodepools import (
    NodePoolIn,
    NodePoolOut,
    NodePoolPatchIn,
    NodePoolSpecIn,
    NodeRequestOut,
    PoolNodeOut,
)
from gpupool.domain import Node
from gpupool.domain.nodepools import NodePool, NodeRequest, PoolNode, PoolNodeState
from gpupool.engines.common.executor import ExecutorWithNodePools
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.store import NodePoolRepo


def _pool(name: str, spec: NodePoolSpecIn) -> NodePool:
    """The domain pool of `spec` (a ValidationError, a 422 naming the field, when it is bad)."""
    return NodePool(
        name=name,
        gpus=spec.gpus,
        gpu_model=spec.gpu_model,
        gpu_memory_mib=spec.gpu_memory_mib,
        cpu_milli=round(spec.cpus * 1000),
        memory_mib=spec.memory_mib,
        labels=tuple(spec.labels.items()),
        engine=spec.engine,
        min_nodes=spec.min_nodes,
        max_nodes=spec.max_nodes,
        boot_seconds=spec.boot_seconds,
        cost_per_gpu_hour=spec.cost_per_gpu_hour,
        idle_seconds=spec.idle_seconds,
        request_timeout_seconds=spec.request_timeout_seconds,
    )


def pool_out(
    p: NodePool, nodes: list[PoolNode], reqs: list[NodeRequest], *, admin: bool
) -> NodePoolOut:
    counts = {str(s): 0 for s in PoolNodeState}
    for n in nodes:
        counts[str(n.state)] += 1
    return NodePoolOut(
        name=p.name,
        gpus=p.gpus,
        gpu_model=p.gpu_model,
        gpu_memory_mib=p.gpu_memory_mib,
        cpus=p.cpu_milli / 1000,
        memory_mib=p.memory_mib,
        labels=dict(p.labels),
        engine=p.engine,
        min_nodes=p.min_nodes,
        max_nodes=p.max_nodes,
        boot_seconds=p.boot_seconds,
        cost_per_gpu_hour=p.cost_per_gpu_hour,
        idle_seconds=p.idle_seconds,
        request_timeout_seconds=p.request_timeout_seconds,
        counts=counts,
        nodes=[
            PoolNodeOut(name=n.name, state=n.state.value, since=n.since, idle_since=n.idle_since)
            for n in nodes
        ],
        requests=[
            NodeRequestOut(
                id=r.id,
                count=r.count,
                requested_at=r.requested_at,
                deadline=r.deadline(p),
                atomic=r.atomic,
                for_workloads=list(r.for_workloads) if admin else [],
                workload_count=len(r.for_workloads),
            )
            for r in reqs
        ],
    )


def reachable_nodes(ctx: AppContext, s: Session) -> list[Node]:
    """Nodes of the pools' shapes (`max_nodes` of each) that the engine could bring up: the
    submit check counts them, so work only a pool's node could hold is accepted and waits
    for one. None without `ExecutorWithNodePools`."""
    if not isinstance(ctx.executor, ExecutorWithNodePools):
        return []
    return [
        p.node(f"{p.name}-to-come-{i}") for p in NodePoolRepo(s).list() for i in range(p.max_nodes)
    ]


def list_pools(ctx: AppContext, p: Principal) -> list[NodePoolOut]:
    with ctx.store.read() as s:
        repo = NodePoolRepo(s)
        pools, nodes, reqs = repo.list(), repo.nodes(), repo.requests()
    return [
        pool_out(
            x,
            [n for n in nodes if n.pool == x.name],
            [r for r in reqs if r.pool == x.name],
            admin=p.admin,
        )
        for x in pools
    ]


def get_pool(ctx: AppContext, p: Principal, name: str) -> NodePoolOut:
    with ctx.store.read() as s:
        repo = NodePoolRepo(s)
        pool = repo.get(name)
        nodes = repo.nodes(name)
        reqs = [r for r in repo.requests() if r.pool == name]
    return pool_out(pool, nodes, reqs, admin=p.admin)


def create_pool(ctx: AppContext, p: Principal, body: NodePoolIn) -> NodePoolOut:
    p.require_admin("define node pools")
    pool = _pool(body.name, body)
    with ctx.store.write() as s:
        NodePoolRepo(s).save(pool, create=True)
    ctx.wake_scheduler()
    return pool_out(pool, [], [], admin=True)


def update_pool(ctx: AppContext, p: Principal, name: str, body: NodePoolPatchIn) -> NodePoolOut:
    p.require_admin("change node pools")
    changes = body.model_dump(exclude_unset=True)
    with ctx.store.write() as s:
        repo = NodePoolRepo(s)
        old = repo.get(name)
        fields = {f.name: getattr(old, f.name) for f in dataclasses.fields(old)}
        if "cpus" in changes:
            fields["cpu_milli"] = round(changes.pop("cpus") * 1000)
        if "labels" in changes:
            fields["labels"] = tuple((changes.pop("labels") or {}).items())
        fields.update({k: v for k, v in changes.items() if v is not None or k == "engine"})
        pool = NodePool(**fields)
        repo.save(pool, create=False)
        nodes, reqs = repo.nodes(name), [r for r in repo.requests() if r.pool == name]
    ctx.wake_scheduler()
    return pool_out(pool, nodes, reqs, admin=True)


def delete_pool(ctx: AppContext, p: Principal, name: str) -> None:
    p.require_admin("delete node pools")
    with ctx.store.write() as s:
        NodePoolRepo(s).delete(name)
