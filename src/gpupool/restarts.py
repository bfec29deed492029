"""How often a supervised child process may be restarted (API workers, JupyterHub)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Restarts allowed in any one minute before a supervisor gives up on a child.
MAX_RESTARTS_PER_MINUTE = 5


class RestartBudget:
    """At most `per_minute` restarts in any 60 s window (`clock` gives monotonic seconds).

    `take()` records a restart and returns True, or returns False (recording nothing) when
    the window is full: the child keeps dying and restarting it again would only spin."""

    def __init__(
        self, per_minute: int = MAX_RESTARTS_PER_MINUTE, clock: Callable[[], float] = time.monotonic
    ):
        self.per_minute = per_minute
        self.clock = clock
        self.times: list[float] = []

    def take(self) -> bool:
        now = self.clock()
        self.times = [t for t in self.times if now - t < 60]
        if len(self.times) >= self.per_minute:
            return False
        self.times.append(now)
        return True
