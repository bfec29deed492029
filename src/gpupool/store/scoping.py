"""Exact, case-sensitive tenant scoping in SQL, the same on SQLite and PostgreSQL.

`in_subtrees(column, roots)` keeps rows whose tenant is one of `roots` or lies below one of
them: equal to the root, or starting with the root followed by `/`. It compares with
`substr(column, 1, n) = prefix` rather than `LIKE 'root/%'`: in LIKE, `_` and `%` in a tenant
name are wildcards (`ml_team/%` matches `ml-team/sub`) and SQLite's LIKE ignores case (`Bio/%`
matches `bio/x`), while `=` on text is exact on both databases. `starts_with` is the same
prefix test for other columns (event kinds). The Python twin is `domain.tenancy.in_subtree`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_

from gpupool.domain.tenancy import SEPARATOR


def starts_with(column: Any, prefix: str) -> ColumnElement[bool]:
    """`column` begins with exactly `prefix` (no wildcards, case-sensitive)."""
    if not prefix:
        return column.is_not(None)  # type: ignore[no-any-return]
    return func.substr(column, 1, len(prefix)) == prefix  # type: ignore[no-any-return]


def in_subtree(column: Any, root: str) -> ColumnElement[bool]:
    """`column` names `root` or a tenant below it."""
    return or_(column == root, starts_with(column, root + SEPARATOR))


def in_subtrees(column: Any, roots: Iterable[str]) -> ColumnElement[bool]:
    """`column` names one of `roots` or a tenant below one of them; no roots: nothing."""
    conds = [in_subtree(column, r) for r in roots]
    return or_(*conds) if conds else and_(false())
