"""Secrets: password hashing (argon2) and API tokens (random, stored as SHA-256).

argon2 is slow on purpose (about 0.1 s of one core per check). `PasswordWork` runs it on a
few threads of its own, never on the event loop or the threads that serve other requests, and
refuses work beyond a short queue (429) instead of letting a flood of logins pile up.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

T = TypeVar("T")
_hasher = PasswordHasher()
#: A valid hash to verify against when the user does not exist, so timing does not tell.
_DUMMY_HASH = _hasher.hash("gpupool-no-such-user")

TOKEN_PREFIX = "gp_"
MIN_PASSWORD_LENGTH = 8


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        from gpupool.domain import ValidationError

        raise ValidationError(
            f"passwords need at least {MIN_PASSWORD_LENGTH} characters", "password"
        )
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True if `password` matches; False for a missing hash (spends the same time)."""
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


def new_token() -> tuple[str, str, str]:
    """A fresh token: (id, secret shown once to the user, sha256 of the secret to store)."""
    token_id = secrets.token_hex(6)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token_id, secret, hash_token(secret)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def default_password_threads() -> int:
    """Half the CPUs (at least 1): password checks never take the whole machine."""
    return max(1, (os.cpu_count() or 2) // 2)


class PasswordWork:
    """A bounded pool for argon2: at most `threads` checks run at once and `queue` more wait;
    more than that is refused with 429 (TooManyRequests) at once. Thread-safe; `run` is for
    async code (it waits without holding a thread), `run_blocking` for sync code."""

    def __init__(self, threads: int | None = None, queue: int = 8):
        self.threads = threads or default_password_threads()
        self.limit = self.threads + max(0, queue)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="argon2")
        self._lock = threading.Lock()
        self._taken = 0

    @property
    def taken(self) -> int:
        """Checks running or waiting now."""
        return self._taken

    def _submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        from gpupool.server.problems import TooManyRequests

        with self._lock:
            if self._taken >= self.limit:
                raise TooManyRequests(
                    f"the server is busy checking {self._taken} other passwords; try again in 1 s",
                    retry_after_s=1,
                )
            self._taken += 1
        try:
            fut = self._pool.submit(fn, *args)
        except BaseException:
            self._release()
            raise
        fut.add_done_callback(lambda _: self._release())  # also when the caller gave up
        return fut

    def _release(self) -> None:
        with self._lock:
            self._taken -= 1

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.wrap_future(self._submit(fn, *args))

    def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        return self._submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
