"""Login throttling: failed password checks slow down further tries, per account, per
(account, client address) and per client address.

Each key has a *level*: the recent failures. Every failure adds 1; the level drains by 1
every `drain_s`. While the level is at most `free` nothing happens; above it, the key is
blocked for `base_s * 2**(level - free - 1)` seconds (at most `max_s`), and every login with
that key is refused with 429 and Retry-After, without checking the password (so a flood
costs the server almost nothing); the refusal is sent after up to `REFUSAL_DELAY_S`, so a
client that ignores Retry-After cannot spin on it.

The keys of one login (review F11: the throttle must not be a lockout weapon):

- `pair:NAME@ADDRESS` (`ACCOUNT`): the person at one address mistyping, or a guesser there:
  blocks of up to 15 minutes; failures elsewhere never block this address;
- `account:NAME` (`ACCOUNT_WIDE`): the backstop against guessers spread over many
  addresses. Its block lasts at most `ACCOUNT_WIDE.max_s` (5 minutes) after the latest
  failure, so it admits about one password check per 5 minutes for the account: a stranger
  failing now and then delays the right password by at most that, and a guesser with any
  number of addresses gets about 12 checks an hour after the first few;
- `client:ADDRESS` (`CLIENT`): one address trying many accounts.

A successful login clears its account's key and its own pair key (not its client's); an
admin resetting the password clears the account's key and all its pair keys.

The state lives in the database (`login_throttle`), so every process of one server (API
workers, `gpupool up --workers N`) and every replica sharing the database see the same
counts. Each process also remembers the blocks it has seen, to refuse repeats without asking
the database; `forget_cached()` drops them (after an admin reset, over the bus).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError

from gpupool.clock import Clock
from gpupool.server.problems import TooManyRequests
from gpupool.store import Store
from gpupool.store.rows import LoginThrottleRow
from gpupool.store.throttle import LoginThrottleRepo

#: a refused login is answered after this many seconds (at most its Retry-After), so a client
#: that does not wait sends about one try per second per connection, not hundreds; at most
#: HOLD_AT_MOST refusals are held at once per process (more are answered at once)
REFUSAL_DELAY_S = 1.0
HOLD_AT_MOST = 256
#: blocks one process remembers at most (an optimisation only: the database has them all)
REMEMBER_AT_MOST = 10_000
#: keys whose last failure is older than this are deleted (their level has long drained)
PRUNE_AFTER_S = 86400.0
PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """`free` failures are allowed; each further one blocks for `base_s`, doubling up to
    `max_s`; the count of failures drains by one every `drain_s`."""

    free: int
    base_s: float
    max_s: float
    drain_s: float

    def drained(self, level: float, since: float, now: float) -> float:
        return max(0.0, level - max(0.0, now - since) / self.drain_s)

    def block_s(self, level: float) -> float:
        """How long a key with `level` failures is blocked after its latest failure."""
        over = math.ceil(level - 1e-9) - self.free
        if over <= 0:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** (over - 1))


#: a person mistyping at one address: 5 free tries, then 1 s, 2 s, 4 s ... up to 15 min; one
#: try back every 10 min. A guesser gets about one try per 10 minutes per account and address.
ACCOUNT = ThrottlePolicy(free=5, base_s=1.0, max_s=900.0, drain_s=600.0)
#: the account from every address together: the same, but a block ends at most 5 minutes
#: after the latest failure, so the right password gets through within 5 minutes of a
#: stranger's failure, while guessers from many addresses get about one check per 5 minutes
ACCOUNT_WIDE = ThrottlePolicy(free=5, base_s=1.0, max_s=300.0, drain_s=600.0)
#: one address may serve many people (NAT, a proxy): 20 free, drains one per minute.
CLIENT = ThrottlePolicy(free=20, base_s=1.0, max_s=300.0, drain_s=60.0)


def account_key(user: str) -> str:
    return f"account:{user}"


def _short(address: str) -> str:
    """An address that is not a short one (a forged X-Forwarded-For, say) as its SHA-256,
    so every key fits the column."""
    if len(address) > 64:
        return "sha256-" + hashlib.sha256(address.encode()).hexdigest()
    return address


def client_key(address: str) -> str:
    return f"client:{_short(address)}"


def pair_key(user: str, address: str) -> str:
    """`pair:NAME@ADDRESS`: one account from one client address."""
    return f"{pair_prefix(user)}{_short(address)}"


def pair_prefix(user: str) -> str:
    return f"pair:{user}@"


class LoginThrottle:
    """The throttle of one server process over the shared store. Thread-safe."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        account: ThrottlePolicy = ACCOUNT_WIDE,
        client: ThrottlePolicy = CLIENT,
        pair: ThrottlePolicy = ACCOUNT,
    ):
        self.store = store
        self.clock = clock
        self.policies = {"account": account, "client": client, "pair": pair}
        self._blocked: dict[str, float] = {}  # key -> blocked until (seen by this process)
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self.refusal_delay_s = REFUSAL_DELAY_S
        self._held = 0

    @staticmethod
    def keys(user: str, client: str | None) -> list[str]:
        address = client or "unknown"
        # the narrowest first: of equal blocks, a refusal names the first
        return [pair_key(user, address), account_key(user), client_key(address)]

    def _policy(self, key: str) -> ThrottlePolicy:
        return self.policies[key.partition(":")[0]]

    # -- checks ---------------------------------------------------------------------------

    def check_cached(self, keys: list[str]) -> None:
        """Raise TooManyRequests if this process knows one of `keys` is blocked now (no I/O,
        safe on the event loop)."""
        now = self.clock.now()
        with self._lock:
            until = {k: self._blocked.get(k, 0.0) for k in keys}
        self._raise_if_blocked(until, now)

    def check(self, keys: list[str]) -> None:
        """Raise TooManyRequests if one of `keys` is blocked now (asks the database)."""
        self.check_cached(keys)
        with self.store.read() as s:
            rows = LoginThrottleRepo(s).get_many(keys)
            until = {k: r.blocked_until for k, r in rows.items()}
        self._remember(until)
        self._raise_if_blocked(until, self.clock.now())

    def _remember(self, until: dict[str, float]) -> None:
        now = self.clock.now()
        with self._lock:
            if len(self._blocked) >= REMEMBER_AT_MOST:  # forget the blocks that are over
                self._blocked = {k: t for k, t in self._blocked.items() if t > now}
                if len(self._blocked) >= REMEMBER_AT_MOST:
                    self._blocked.clear()  # the database still has them
            for k, t in until.items():
                if t > now:
                    self._blocked[k] = t
                else:
                    self._blocked.pop(k, None)

    def _raise_if_blocked(self, until: dict[str, float], now: float) -> None:
        blocked = {k: t for k, t in until.items() if t > now}
        if not blocked:
            return
        key, t = max(blocked.items(), key=lambda kv: kv[1])
        kind, _, name = key.partition(":")
        if kind == "account":
            who = f"user {name!r} (from any address)"
        elif kind == "pair":
            who = f"user {name.rpartition('@')[0]!r} from your address"
        else:
            who = f"your address ({name})"
        raise TooManyRequests(
            f"too many failed logins for {who}; try again after {_clock_time(t)} "
            f"(in {math.ceil(t - now)} s)",
            retry_after_s=t - now,
            retry_at=t,
        )

    async def hold(self, retry_after_s: float) -> None:
        """Wait before a refusal is sent (no thread, no CPU): see REFUSAL_DELAY_S."""
        delay = min(self.refusal_delay_s, retry_after_s)
        if delay <= 0 or self._held >= HOLD_AT_MOST:
            return
        self._held += 1  # only the event loop's thread counts
        try:
            await asyncio.sleep(delay)
        finally:
            self._held -= 1

    # -- outcomes -------------------------------------------------------------------------

    def failed(self, keys: list[str]) -> None:
        """Count a failed password check against each of `keys`."""
        for _ in range(3):  # a concurrent first failure of the same key: count again
            try:
                self._failed(keys)
                return
            except IntegrityError:
                continue
        self._failed(keys)

    def _failed(self, keys: list[str]) -> None:
        now = self.clock.now()
        until: dict[str, float] = {}
        with self.store.write() as s:
            repo = LoginThrottleRepo(s)
            for key in sorted(keys):  # one lock order for every process
                policy = self._policy(key)
                row = repo.locked(key)
                if row is None:
                    row = LoginThrottleRow(key=key, level=0.0, last_failure_at=now, blocked_until=0)
                    repo.add(row)
                row.level = policy.drained(row.level, row.last_failure_at, now) + 1.0
                row.last_failure_at = now
                wait = policy.block_s(row.level)
                row.blocked_until = now + wait if wait else 0.0
                until[key] = row.blocked_until
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._pruned_at = now
                repo.prune(now - PRUNE_AFTER_S)
        self._remember(until)

    def succeeded(self, user: str, client: str | None = None) -> None:
        """A correct password for `user` from `client`: its account, and the account at
        that address, start afresh."""
        keys = [account_key(user), pair_key(user, client or "unknown")]
        with self._lock:
            for key in keys:
                self._blocked.pop(key, None)
        with self.store.write() as s:
            repo = LoginThrottleRepo(s)
            for key in keys:
                repo.delete(key)

    def forget(self, user: str) -> None:
        """Clear `user`'s account key and its keys at every address (an admin's password
        reset)."""
        key, prefix = account_key(user), pair_prefix(user)
        with self._lock:
            for k in [k for k in self._blocked if k == key or k.startswith(prefix)]:
                del self._blocked[k]
        with self.store.write() as s:
            repo = LoginThrottleRepo(s)
            repo.delete(key)
            repo.delete_prefixed(prefix)

    def forget_cached(self) -> None:
        """Drop what this process remembers; the database stays the truth."""
        with self._lock:
            self._blocked.clear()


def _clock_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
