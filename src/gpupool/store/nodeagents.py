"""Node agents: their credentials and the latest report of each (migration 0004).

A node credential lets one `gpupool agent` report for one node name and do nothing else; like
user API tokens only the SHA-256 of its secret is stored. The latest report of a node is kept
as JSON (the server's `NodeReportIn` schema, workload owners resolved) so that every server
process (API workers included) serves it, and a restarted server still knows when each agent
last reported.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, ForeignKey, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpupool.store.errors import NotFound
from gpupool.store.rows import Base


class NodeTokenRow(Base):
    """A node credential: the node name it may report for (the node need not exist yet)."""

    __tablename__ = "node_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(128), default="")
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)


class NodeReportRow(Base):
    """The latest agent report of a node, when the server received it, and the node state
    it had before its agent was declared lost (restored when the agent reports again)."""

    __tablename__ = "node_reports"

    node: Mapped[str] = mapped_column(
        ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True
    )
    received_at: Mapped[float] = mapped_column(Float)
    interval_s: Mapped[float] = mapped_column(Float)
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state_before_lost: Mapped[str | None] = mapped_column(String(16))


class NodeTokenRepo:
    """Node credentials. Sees only hashes; secrets never reach the database."""

    def __init__(self, s: Session):
        self.s = s

    def issue(
        self, token_id: str, node: str, token_hash: str, now: float, created_by: str
    ) -> NodeTokenRow:
        """Record a new credential for `node` (created now by `created_by`, never used)."""
        row = NodeTokenRow(
            id=token_id,
            node=node,
            token_hash=token_hash,
            created_at=now,
            created_by=created_by,
            revoked_at=None,
            last_used_at=None,
        )
        self.s.add(row)
        self.s.flush()
        return row

    def by_hash(self, token_hash: str) -> NodeTokenRow | None:
        return self.s.scalar(select(NodeTokenRow).where(NodeTokenRow.token_hash == token_hash))

    def list(self, node: str | None = None) -> list[NodeTokenRow]:
        q = select(NodeTokenRow).order_by(NodeTokenRow.node, NodeTokenRow.created_at)
        if node is not None:
            q = q.where(NodeTokenRow.node == node)
        return list(self.s.scalars(q))

    def revoke(self, node: str, token_id: str, now: float) -> NodeTokenRow:
        row = self.s.get(NodeTokenRow, token_id)
        if row is None or row.node != node:
            raise NotFound(
                f"node {node!r} has no credential {token_id!r}; "
                f"list them with GET /api/v1/nodes/{node}/tokens"
            )
        if row.revoked_at is None:
            row.revoked_at = now
        self.s.flush()
        return row

    def touch(self, token_id: str, now: float) -> None:
        row = self.s.get(NodeTokenRow, token_id)
        if row is not None:
            row.last_used_at = now


class NodeReportRepo:
    """The latest report per node."""

    def __init__(self, s: Session):
        self.s = s

    def get(self, node: str) -> NodeReportRow | None:
        return self.s.get(NodeReportRow, node)

    def list(self) -> list[NodeReportRow]:
        return list(self.s.scalars(select(NodeReportRow).order_by(NodeReportRow.node)))

    def put(self, node: str, received_at: float, interval_s: float, report: dict[str, Any]) -> None:
        """Keep `report` as the node's latest (the node must be registered)."""
        row = self.s.get(NodeReportRow, node)
        if row is None:
            row = NodeReportRow(node=node, state_before_lost=None)
            self.s.add(row)
        row.received_at = received_at
        row.interval_s = interval_s
        row.report = report
        self.s.flush()

    def mark_lost(self, node: str, state_before: str) -> None:
        row = self.s.get(NodeReportRow, node)
        if row is None:
            raise NotFound(f"node {node!r} has no agent report")
        row.state_before_lost = state_before
