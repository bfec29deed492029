"""Rows kept per workload and UTC day (usage, energy): the one place that finds or starts a
(workload, day) row and that keeps such rows to a range of days and a scope."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from gpupool.store.rows import Base
from gpupool.store.scoping import in_subtrees

R = TypeVar("R", bound=Base)


def day_row(
    s: Session, row: type[R], *, workload_id: str, tenant: str, user: str, day: str, **zeros: Any
) -> R:
    """The (workload, day) row of `row` (a class with `workload_id`, `tenant`, `user` and `day`
    columns), locked for update; added with `zeros` when missing."""
    cols: Any = row
    found = s.scalar(
        select(row).where(cols.workload_id == workload_id, cols.day == day).with_for_update()
    )
    if found is None:
        found = row(workload_id=workload_id, tenant=tenant, user=user, day=day, **zeros)
        s.add(found)
    return found


def within(
    row: Any,
    *,
    from_day: str | None = None,
    to_day: str | None = None,
    tenants: Iterable[str] | None = None,
    user: str | None = None,
) -> list[ColumnElement[bool]]:
    """Conditions keeping rows of `row` (as for `day_row`) to days in [from_day, to_day]
    (inclusive, YYYY-MM-DD), to the subtrees of `tenants` (None: all) and to one `user`
    (None: all)."""
    conds: list[ColumnElement[bool]] = []
    if from_day:
        conds.append(row.day >= from_day)
    if to_day:
        conds.append(row.day <= to_day)
    if tenants is not None:
        conds.append(in_subtrees(row.tenant, tenants))
    if user is not None:
        conds.append(row.user == user)
    return conds
