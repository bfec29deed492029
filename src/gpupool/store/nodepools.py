"""Node pools (issue 34): their rows, converters and repository.

`node_pools` holds each pool's definition; `node_pool_nodes` which pool a node belongs to and
its pool state (a powered-down or requested node may not be in `nodes` yet, so it is keyed by
the node's name, not a foreign key); `node_pool_requests` the requests for nodes, open and
ended (kept so that a restarted server neither repeats nor forgets one).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpupool.domain.nodepools import NodePool, NodeRequest, PoolNode, PoolNodeState, RequestState
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import Base


class NodePoolRow(Base):
    __tablename__ = "node_pools"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str] = mapped_column(String(128), default="")
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    engine: Mapped[str | None] = mapped_column(String(64))
    min_nodes: Mapped[int] = mapped_column(Integer, default=0)
    max_nodes: Mapped[int] = mapped_column(Integer, default=1)
    boot_seconds: Mapped[float] = mapped_column(Float)
    cost_per_gpu_hour: Mapped[float] = mapped_column(Float, default=0.0)
    idle_seconds: Mapped[float] = mapped_column(Float)
    request_timeout_seconds: Mapped[float] = mapped_column(Float)


class NodePoolNodeRow(Base):
    __tablename__ = "node_pool_nodes"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    pool: Mapped[str] = mapped_column(ForeignKey("node_pools.name", ondelete="CASCADE"), index=True)
    state: Mapped[str] = mapped_column(String(16))
    since: Mapped[float] = mapped_column(Float)
    idle_since: Mapped[float | None] = mapped_column(Float)


class NodePoolRequestRow(Base):
    __tablename__ = "node_pool_requests"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool: Mapped[str] = mapped_column(ForeignKey("node_pools.name", ondelete="CASCADE"), index=True)
    count: Mapped[int] = mapped_column(Integer)
    for_workloads: Mapped[list[Any]] = mapped_column(JSON, default=list)
    atomic: Mapped[bool] = mapped_column(Boolean, default=False)
    requested_at: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), index=True)
    engine_ref: Mapped[str] = mapped_column(String(253), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    ended_at: Mapped[float | None] = mapped_column(Float)


def pool_to_domain(r: NodePoolRow) -> NodePool:
    return NodePool(
        name=r.name,
        gpus=r.gpus,
        gpu_model=r.gpu_model,
        gpu_memory_mib=r.gpu_memory_mib,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        labels=tuple(sorted((str(k), str(v)) for k, v in (r.labels or {}).items())),
        engine=r.engine,
        min_nodes=r.min_nodes,
        max_nodes=r.max_nodes,
        boot_seconds=r.boot_seconds,
        cost_per_gpu_hour=r.cost_per_gpu_hour,
        idle_seconds=r.idle_seconds,
        request_timeout_seconds=r.request_timeout_seconds,
    )


def pool_to_row(p: NodePool, r: NodePoolRow | None = None) -> NodePoolRow:
    r = r or NodePoolRow(name=p.name)
    r.gpus, r.gpu_model, r.gpu_memory_mib = p.gpus, p.gpu_model, p.gpu_memory_mib
    r.cpu_milli, r.memory_mib, r.labels, r.engine = (
        p.cpu_milli,
        p.memory_mib,
        dict(p.labels),
        p.engine,
    )
    r.min_nodes, r.max_nodes, r.boot_seconds = p.min_nodes, p.max_nodes, p.boot_seconds
    r.cost_per_gpu_hour, r.idle_seconds = p.cost_per_gpu_hour, p.idle_seconds
    r.request_timeout_seconds = p.request_timeout_seconds
    return r


def _node(r: NodePoolNodeRow) -> PoolNode:
    return PoolNode(r.node, r.pool, PoolNodeState(r.state), r.since, r.idle_since)


def _request(r: NodePoolRequestRow) -> NodeRequest:
    return NodeRequest(
        id=r.id,
        pool=r.pool,
        count=r.count,
        for_workloads=tuple(str(w) for w in r.for_workloads or ()),
        requested_at=r.requested_at,
        state=RequestState(r.state),
        atomic=r.atomic,
        engine_ref=r.engine_ref,
        reason=r.reason,
        ended_at=r.ended_at,
    )


class NodePoolRepo:
    """Pools, their nodes' states and their requests for nodes."""

    def __init__(self, s: Session):
        self.s = s

    # -- pools -------------------------------------------------------------------------------

    def list(self) -> list[NodePool]:
        return [pool_to_domain(r) for r in self.s.scalars(select(NodePoolRow).order_by("name"))]

    def get(self, name: str) -> NodePool:
        row = self.s.get(NodePoolRow, name)
        if row is None:
            raise NotFound(f"no node pool {name!r}; list them with GET /api/v1/node-pools")
        return pool_to_domain(row)

    def save(self, pool: NodePool, *, create: bool) -> NodePool:
        row = self.s.get(NodePoolRow, pool.name)
        if create and row is not None:
            raise Conflict(f"node pool {pool.name!r} already exists; change it with PATCH")
        if not create and row is None:
            raise NotFound(f"no node pool {pool.name!r}; list them with GET /api/v1/node-pools")
        if row is None:
            self.s.add(pool_to_row(pool))
        else:
            pool_to_row(pool, row)
        self.s.flush()
        return pool

    def delete(self, name: str) -> None:
        row = self.s.get(NodePoolRow, name)
        if row is None:
            raise NotFound(f"no node pool {name!r}; list them with GET /api/v1/node-pools")
        busy = self.s.scalars(
            select(NodePoolNodeRow.node).where(
                NodePoolNodeRow.pool == name, NodePoolNodeRow.state != PoolNodeState.POWERED_DOWN
            )
        ).all()
        if busy:
            raise Conflict(
                f"node pool {name!r} still has nodes that are not powered down "
                f"({', '.join(sorted(busy)[:5])}); set its max_nodes and min_nodes to let them "
                "go first, or wait until they are given back"
            )
        self.s.delete(row)
        self.s.flush()

    # -- nodes -------------------------------------------------------------------------------

    def nodes(self, pool: str | None = None) -> list[PoolNode]:
        q = select(NodePoolNodeRow).order_by(NodePoolNodeRow.pool, NodePoolNodeRow.node)
        if pool is not None:
            q = q.where(NodePoolNodeRow.pool == pool)
        return [_node(r) for r in self.s.scalars(q)]

    def put_node(self, node: PoolNode) -> None:
        """Record `node` (its pool, state and times), replacing what was recorded."""
        if self.s.get(NodePoolRow, node.pool) is None:
            raise NotFound(f"no node pool {node.pool!r} for node {node.name!r}")
        row = self.s.get(NodePoolNodeRow, node.name) or NodePoolNodeRow(node=node.name)
        row.pool, row.state, row.since, row.idle_since = (
            node.pool,
            str(node.state),
            node.since,
            node.idle_since,
        )
        self.s.add(row)
        self.s.flush()

    def remove_node(self, name: str) -> None:
        row = self.s.get(NodePoolNodeRow, name)
        if row is not None:
            self.s.delete(row)
            self.s.flush()

    # -- requests ----------------------------------------------------------------------------

    def requests(self, *, open_only: bool = True, limit: int = 200) -> list[NodeRequest]:
        """Requests, newest first (open ones only, unless `open_only` is False)."""
        q = select(NodePoolRequestRow).order_by(NodePoolRequestRow.requested_at.desc())
        if open_only:
            q = q.where(NodePoolRequestRow.state == RequestState.OPEN)
        return [_request(r) for r in self.s.scalars(q.limit(limit))]

    def put_request(self, req: NodeRequest) -> None:
        """Record `req` (new, or a change of state of one recorded)."""
        row = self.s.get(NodePoolRequestRow, req.id) or NodePoolRequestRow(id=req.id)
        row.pool, row.count, row.for_workloads = req.pool, req.count, list(req.for_workloads)
        row.atomic, row.requested_at, row.state = req.atomic, req.requested_at, str(req.state)
        row.engine_ref, row.reason, row.ended_at = req.engine_ref, req.reason, req.ended_at
        self.s.add(row)
        self.s.flush()
