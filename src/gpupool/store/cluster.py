"""Repository for nodes and their GPUs."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain import GPU, GPUHealth, Node, NodeState, SharingMode
from gpupool.store.convert import (
    gpu_to_domain,
    gpu_to_row,
    node_fields_to_row,
    node_to_domain,
    outside_to_domain,
)
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import GpuRow, NodeRow


class NodeRepo:
    def __init__(self, s: Session):
        self.s = s

    def list(self) -> list[Node]:
        """All nodes by name. Read as plain rows (two queries, no ORM objects): it is on the
        path of every submission and every scheduling pass."""
        gpus: dict[str, list[GPU]] = {}
        q = select(*GpuRow.__table__.c).order_by(GpuRow.node, GpuRow.index)
        for r in self.s.execute(q):
            g = r._mapping  # a column named "index" clashes with the tuple method
            gpus.setdefault(g["node"], []).append(
                GPU(
                    index=g["index"],
                    uuid=g["uuid"],
                    model=g["model"],
                    memory_mib=g["memory_mib"],
                    sharing=SharingMode(g["sharing"]),
                    health=GPUHealth(g["health"]),
                    outside=outside_to_domain(g["outside"]),
                    mig_layout=g["mig_layout"],
                )
            )
        rows = self.s.execute(select(*NodeRow.__table__.c).order_by(NodeRow.name))
        return [node_to_domain(r, tuple(gpus.get(r.name, ()))) for r in rows]  # type: ignore[arg-type]

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
