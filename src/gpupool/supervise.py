"""Child processes that `gpupool up` keeps running: its API workers and its JupyterHub.

`Supervisor` starts them, restarts one that exits (within a `RestartBudget`: a child that
keeps dying is left down rather than restarted in a spin), tells its owner about every exit,
and stops them all: first the owner's polite request when it has one, then SIGTERM, then
SIGKILL, each to the child's whole process group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Restarts allowed in any one minute before a supervisor leaves a child down.
MAX_RESTARTS_PER_MINUTE = 5


class RestartBudget:
    """At most `per_minute` restarts in any 60 s window (`clock` gives monotonic seconds).

    `take()` records a restart and returns True, or returns False (recording nothing) when
    the window is full."""

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


class Supervisor:
    """Keeps children 1..`count` running. `spawn(i)` starts child i in its own session
    (``start_new_session=True``: it is signalled as a process group) and returns its Popen.

    `check()` is one round of watching (`start()` runs it every `check_every_s` s on a
    thread): each exited child is restarted when `budget` allows, else left down;
    `on_exit(i, returncode, restarted)` hears of every exit, and `on_all_gone()` runs when
    no child is left. `stop()` ends them all: `ask(proc)` first when given, then SIGTERM,
    then SIGKILL, waiting up to `grace_s` after each step."""

    def __init__(
        self,
        count: int,
        spawn: Callable[[int], subprocess.Popen],
        *,
        on_exit: Callable[[int, int, bool], None] | None = None,
        on_all_gone: Callable[[], None] | None = None,
        ask: Callable[[subprocess.Popen], None] | None = None,
        budget: RestartBudget | None = None,
        grace_s: float = 5.0,
        check_every_s: float = 1.0,
        name: str = "supervisor",
    ):
        self.count = count
        self.spawn = spawn
        self.on_exit = on_exit
        self.on_all_gone = on_all_gone
        self.ask = ask
        self.budget = budget or RestartBudget()
        self.grace_s = grace_s
        self.check_every_s = check_every_s
        self.name = name
        self.procs: dict[int, subprocess.Popen] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, watch: bool = True) -> None:
        """Start every child; with `watch`, also the thread that runs `check()`."""
        for index in range(1, self.count + 1):
            self.procs[index] = self.spawn(index)
        if watch:
            self._thread = threading.Thread(target=self._watch, name=self.name, daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.wait(self.check_every_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watcher must outlive one bad round
                log.exception("%s: watching its children failed", self.name)

    def check(self) -> None:
        for index, proc in list(self.procs.items()):
            if proc.poll() is not None and not self._stopping.is_set():
                self._exited(index, proc.returncode)

    def _exited(self, index: int, returncode: int) -> None:
        restart = self.budget.take()
        if self.on_exit is not None:
            self.on_exit(index, returncode, restart)
        if restart:
            self.procs[index] = self.spawn(index)
            return
        del self.procs[index]
        if not self.procs and self.on_all_gone is not None:
            self.on_all_gone()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def stop(self) -> None:
        """Stop watching, then end every child (see the class docstring)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        steps: list[Callable[[subprocess.Popen], None]] = [
            *([self.ask] if self.ask is not None else []),
            lambda p: _signal_group(p, signal.SIGTERM),
            lambda p: _signal_group(p, signal.SIGKILL),
        ]
        for step in steps:
            left = [p for p in self.procs.values() if p.poll() is None]
            for proc in left:
                step(proc)
            deadline = time.monotonic() + self.grace_s
            for proc in left:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
