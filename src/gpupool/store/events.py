"""Repository for events: append-only (no update, no delete)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.domain import Event
from gpupool.store.convert import event_to_domain, event_to_row
from gpupool.store.rows import EventRow
from gpupool.store.scoping import in_subtrees, starts_with


class EventRepo:
    def __init__(self, s: Session):
        self.s = s

    def add(self, event: Event) -> None:
        self.s.add(event_to_row(event))

    def list(
        self,
        *,
        workload_id: str | None = None,
        tenants: Iterable[str] | None = None,
        user: str | None = None,
        kind: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[tuple[int, Event]]:
        """Newest first, with their ids. `tenants` keeps events of those subtrees (and, for
        a user filter, also the user's own events); `kind` matches a prefix (`workload.`)."""
        q = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
        if workload_id is not None:
            q = q.where(EventRow.workload_id == workload_id)
        if tenants is not None:
            scope = in_subtrees(EventRow.tenant, tenants)
            if user is not None:
                scope = or_(scope, EventRow.user == user)
            q = q.where(scope)
        elif user is not None:
            q = q.where(EventRow.user == user)
        if kind:
            q = q.where(starts_with(EventRow.kind, kind))
        if since is not None:
            q = q.where(EventRow.at >= since)
        return [(r.id, event_to_domain(r)) for r in self.s.scalars(q)]
