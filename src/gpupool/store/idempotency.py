"""Repository for submissions' idempotency keys (`IdempotencyKeyRow`)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from gpupool.store.rows import IdempotencyKeyRow


class IdempotencyRepo:
    def __init__(self, s: Session):
        self.s = s

    def get(self, user: str, key: str) -> IdempotencyKeyRow | None:
        return self.s.get(IdempotencyKeyRow, (user, key))

    def add(self, user: str, key: str, request_hash: str, workload_id: str, now: float) -> None:
        """Bind `key` of `user` to `workload_id`. Raises IntegrityError (at flush) when the key
        is taken, e.g. by a concurrent request with the same key."""
        self.s.add(
            IdempotencyKeyRow(
                user=user,
                key=key,
                request_hash=request_hash,
                workload_id=workload_id,
                created_at=now,
            )
        )
        self.s.flush()
