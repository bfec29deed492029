"""Repository for the login throttle's state (`LoginThrottleRow`); the policy is
`gpupool.server.throttle`."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpupool.store.rows import LoginThrottleRow


class LoginThrottleRepo:
    def __init__(self, s: Session):
        self.s = s

    def get_many(self, keys: Iterable[str]) -> dict[str, LoginThrottleRow]:
        q = select(LoginThrottleRow).where(LoginThrottleRow.key.in_(list(keys)))
        return {r.key: r for r in self.s.scalars(q)}

    def locked(self, key: str) -> LoginThrottleRow | None:
        """The row of `key`, locked for update on PostgreSQL (SQLite's write transaction
        already excludes other writers)."""
        q = select(LoginThrottleRow).where(LoginThrottleRow.key == key)
        if self.s.get_bind().dialect.name != "sqlite":
            q = q.with_for_update()
        return self.s.scalar(q)

    def add(self, row: LoginThrottleRow) -> None:
        self.s.add(row)
        self.s.flush()

    def delete(self, key: str) -> None:
        self.s.execute(delete(LoginThrottleRow).where(LoginThrottleRow.key == key))

    def delete_prefixed(self, prefix: str) -> None:
        """Delete every key that starts with `prefix` (taken literally, not as a pattern)."""
        self.s.execute(
            delete(LoginThrottleRow).where(LoginThrottleRow.key.startswith(prefix, autoescape=True))
        )

    def prune(self, before: float) -> int:
        """Forget keys whose last failure is older than `before`; returns how many."""
        res = self.s.execute(
            delete(LoginThrottleRow).where(LoginThrottleRow.last_failure_at < before)
        )
        return int(res.rowcount or 0)  # type: ignore[attr-defined]
