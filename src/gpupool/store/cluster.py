"""Repository for nodes and their GPUs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import JSON, Text, cast, select
from sqlalchemy.orm import Session

from gpupool.domain import GPU, Node, NodeState, SharingMode
from gpupool.store.convert import (
    GPU_FIELDS,
    NODE_FIELDS,
    gpu_from,
    gpu_to_domain,
    gpu_to_row,
    node_fields_to_row,
    node_from,
    node_to_domain,
)
from gpupool.store.db import plain_execute
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import GpuRow, NodeRow


def _plain(table: Any, fields: tuple[str, ...]) -> tuple[Any, ...]:
    """`fields`' columns of `table`, JSON ones as their text (decoded by the converter only
    for the rows converted)."""
    cols = [getattr(table, f) for f in fields]
    return tuple(cast(c, Text) if isinstance(c.type, JSON) else c for c in cols)


_NODE_COLUMNS = _plain(NodeRow, NODE_FIELDS)
_GPU_COLUMNS = (GpuRow.node, *_plain(GpuRow, GPU_FIELDS))
#: one node as plain values: (its row's, its GPUs' by index, each without the node's name),
#: in the order of `NODE_FIELDS` and `GPU_FIELDS`
NodeRows = tuple[tuple[Any, ...], tuple[tuple[Any, ...], ...]]


def gpu_of(values: tuple[Any, ...]) -> GPU:
    """The GPU of one GPU entry of `NodeRepo.rows()`."""
    return gpu_from(*values)


def node_of(values: tuple[Any, ...], gpus: tuple[GPU, ...]) -> Node:
    """The node of one `NodeRepo.rows()` entry's row values, with its `gpus` (by index)."""
    return node_from(gpus, *values)


class NodeRepo:
    def __init__(self, s: Session):
        self.s = s

    def list(self) -> list[Node]:
        """All nodes by name. Read as plain rows (two queries, no ORM objects): it is on the
        path of every submission and every scheduling pass."""
        return [node_of(n, tuple(map(gpu_of, g))) for n, g in self.rows()]

    def rows(self) -> Sequence[NodeRows]:
        """What `list()` is made of, as plain values: per node by name, its row's values and
        its GPUs' (by index), JSON columns as text (`node_of`, `gpu_of` convert them). For the
        scheduler loop, which converts only the nodes and GPUs that changed. Read past the ORM,
        after a flush (`plain_execute`)."""
        run = plain_execute(self.s)  # plain rows (flushed first: see plain_execute)
        gpus: dict[str, list[tuple[Any, ...]]] = {}
        for g in run(select(*_GPU_COLUMNS).order_by(GpuRow.node, GpuRow.index)):
            gpus.setdefault(g[0], []).append(tuple(g[1:]))
        q = select(*_NODE_COLUMNS).order_by(NodeRow.name)
        return [(tuple(r), tuple(gpus.get(r[0], ()))) for r in run(q)]

    def get(self, name: str) -> Node:
        row = self.s.get(NodeRow, name)
        if row is None:
            raise NotFound(f"no node {name!r}; list them with GET /api/v1/nodes")
        return node_to_domain(row)

    def upsert(self, node: Node) -> Node:
        """Register or refresh `node` and its GPUs (as an agent or `gpupool up` reports them).

        The admin's sharing mode and MIG layout of a known GPU are kept: hardware discovery
        never resets them.
        GPUs no longer reported are removed.
        """
        row = self.s.get(NodeRow, node.name)
        if row is None:
            row = NodeRow(name=node.name)
            self.s.add(row)
        node_fields_to_row(node, row)
        known = {g.uuid: g for g in row.gpus}
        for g in node.gpus:
            other = self.s.get(GpuRow, g.uuid)
            if other is not None and other.node != node.name:
                raise Conflict(f"GPU {g.uuid} is already registered on node {other.node!r}")
            existing = known.pop(g.uuid, None)
            if existing is not None:
                sharing, layout = existing.sharing, existing.mig_layout
                kept = gpu_to_row(g, node.name, existing)
                kept.sharing, kept.mig_layout = sharing, layout
            else:
                row.gpus.append(gpu_to_row(g, node.name))
        for gone in known.values():
            row.gpus.remove(gone)
        self.s.flush()
        return node_to_domain(row)

    def set_state(self, name: str, state: NodeState) -> Node:
        row = self.s.get(NodeRow, name)
        if row is None:
            raise NotFound(f"no node {name!r}")
        row.state = str(state)
        self.s.flush()
        return node_to_domain(row)

    def heartbeat(self, name: str, now: float) -> None:
        row = self.s.get(NodeRow, name)
        if row is None:
            raise NotFound(f"no node {name!r}")
        row.last_heartbeat = now

    def gpus(self) -> list[tuple[str, GPU]]:
        """Every GPU with its node's name, by node then index."""
        rows = self.s.scalars(select(GpuRow).order_by(GpuRow.node, GpuRow.index))
        return [(r.node, gpu_to_domain(r)) for r in rows]

    def gpu(self, uuid: str) -> tuple[str, GPU]:
        row = self.s.get(GpuRow, uuid)
        if row is None:
            raise NotFound(f"no GPU {uuid!r}; list them with GET /api/v1/gpus")
        return row.node, gpu_to_domain(row)

    def set_sharing(self, uuid: str, mode: SharingMode) -> tuple[str, GPU]:
        row = self.s.get(GpuRow, uuid)
        if row is None:
            raise NotFound(f"no GPU {uuid!r}; list them with GET /api/v1/gpus")
        row.sharing = str(mode)
        self.s.flush()
        return row.node, gpu_to_domain(row)

    def set_mig_layout(self, uuid: str, layout: str | None) -> tuple[str, GPU]:
        """Record the MIG layout of a GPU (the caller has checked it fits the model)."""
        row = self.s.get(GpuRow, uuid)
        if row is None:
            raise NotFound(f"no GPU {uuid!r}; list them with GET /api/v1/gpus")
        row.mig_layout = layout
        self.s.flush()
        return row.node, gpu_to_domain(row)

    def delete(self, name: str) -> None:
        row = self.s.get(NodeRow, name)
        if row is None:
            raise NotFound(f"no node {name!r}")
        self.s.delete(row)
        self.s.flush()
