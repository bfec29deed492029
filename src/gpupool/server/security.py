"""Secrets: password hashing (argon2) and API tokens (random, stored as SHA-256).

argon2 is slow on purpose (about 0.1 s of one core per check). `PasswordWork` runs it on a
few threads of its own, never on the event loop or the threads that serve other requests, and
refuses work beyond a short queue (429) instead of letting a flood of logins pile up. The
threads run at a lower CPU priority, so under load a password check waits, not a request.
"""

from __future__ import annotations

import asyncio
import contextlib
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


#: niceness of the password threads: when CPUs are short, request threads go first
PASSWORD_NICE = 10


def _lower_priority() -> None:
    """Run this thread at a lower CPU priority (Linux: niceness is per thread)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PASSWORD_NICE)


def default_password_threads() -> int:
    """Half the CPUs (at least 1): password checks never take the whole machine."""
    return max(1, (os.cpu_count() or 2) // 2)


class PasswordWork:
    """A bounded pool for argon2: at most `threads` checks run at once; up to `queue` more wait
    for a thread, each at most `wait_s` seconds (without using a CPU or a request thread);
    beyond that the request is refused with 429 (TooManyRequests). A flood of logins thus
    costs at most `threads` cores, and its clients wait instead of spinning. Thread-safe;
    `run`/`run_admitted` are for async code, `run_blocking` for sync code."""

    def __init__(self, threads: int | None = None, queue: int = 64, wait_s: float = 2.0):
        self.threads = threads or default_password_threads()
        self.limit = self.threads + max(0, queue)
        self.wait_s = wait_s
        self._pool = ThreadPoolExecutor(
            self.threads, thread_name_prefix="argon2", initializer=_lower_priority
        )
        self._lock = threading.Lock()
        self._taken = 0

    @property
    def taken(self) -> int:
        """Checks running or waiting now."""
        return self._taken

    def _busy(self) -> Exception:
        from gpupool.server.problems import TooManyRequests

        return TooManyRequests(
            f"the server is busy checking {self._taken} other passwords; try again in 1 s",
            retry_after_s=1,
        )

    def admit(self) -> None:
        """Take a place (running or waiting), or raise TooManyRequests (429) at once. Pair
        with `run_admitted`, or `release` the place if it is not used."""
        with self._lock:
            if self._taken >= self.limit:
                raise self._busy()
            self._taken += 1

    def release(self) -> None:
        with self._lock:
            self._taken -= 1

    def _start(self, fn: Callable[..., T], *args: object) -> Future[T]:
        try:
            fut = self._pool.submit(fn, *args)
        except BaseException:
            self.release()
            raise
        fut.add_done_callback(lambda _: self.release())  # also when cancelled
        return fut

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        self.admit()
        return await self.run_admitted(fn, *args)

    async def run_admitted(self, fn: Callable[..., T], *args: object) -> T:
        """`run` with the place already taken by `admit`."""
        fut = self._start(fn, *args)
        await asyncio.wait([asyncio.wrap_future(fut)], timeout=self.wait_s)
        if not fut.done() and fut.cancel():  # still waiting for a thread: give up
            raise self._busy()
        return await asyncio.wrap_future(fut)

    def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        self.admit()
        fut = self._start(fn, *args)
        with contextlib.suppress(TimeoutError):
            fut.result(timeout=self.wait_s)
        if not fut.done() and fut.cancel():
            raise self._busy()
        return fut.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
