"""The background-loop base class.

A `Loop` has one job, `run_once()`, which may be a plain function (run in a worker thread,
so blocking store and executor calls are fine) or a coroutine. `run()` repeats it: after each
pass it waits until `wake()` is called or `interval_s` has passed. An error in a pass is
logged (and counted) and the loop carries on; `start()` after `stop()` starts it afresh.
Tests call `run_once()` directly with a ManualClock: no timers, no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Loop(ABC):
    #: Unique name, used by `LoopGroup.wake(name)` and in logs and metrics.
    name: str = "loop"

    def __init__(
        self,
        interval_s: float = 5.0,
        on_error: Callable[[str], None] | None = None,
        *,
        min_gap_s: float = 0.0,
    ):
        self.interval_s = interval_s
        #: wakes coming faster than this are coalesced: passes start at least this far apart
        self.min_gap_s = min_gap_s
        self.on_error = on_error
        self.passes = 0
        self.errors = 0
        self._task: asyncio.Task[None] | None = None
        self._event: asyncio.Event | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._woken = threading.Event()  # remembers a wake() that came before start()

    @abstractmethod
    def run_once(self) -> Any:
        """Do one pass of the job. Must be safe to call again at any time."""

    def wake(self) -> None:
        """Run a pass soon. Safe from any thread, and before `start()`."""
        self._woken.set()
        aloop, event = self._aloop, self._event
        if aloop is not None and event is not None and not aloop.is_closed():
            with contextlib.suppress(RuntimeError):
                aloop.call_soon_threadsafe(event.set)

    async def pass_once(self) -> None:
        """One pass, with errors logged instead of raised."""
        try:
            result = await asyncio.to_thread(self.run_once)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a loop must survive its errors
            self.errors += 1
            log.exception("%s loop: pass failed; retrying on the next pass", self.name)
            if self.on_error is not None:
                self.on_error(self.name)
        finally:
            self.passes += 1

    async def run(self) -> None:
        self._aloop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        while True:
            self._woken.clear()
            self._event.clear()
            started = time.monotonic()
            await self.pass_once()
            if self._woken.is_set():  # woken during the pass: go again, after min_gap_s
                await asyncio.sleep(max(0.0, started + self.min_gap_s - time.monotonic()))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout=self.interval_s)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name=self.name)
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._event = None
        self._aloop = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()


class LoopGroup:
    """The server's loops, by name."""

    def __init__(self) -> None:
        self._loops: dict[str, Loop] = {}

    def add(self, loop: Loop) -> Loop:
        if loop.name in self._loops:
            raise ValueError(f"a loop named {loop.name!r} is already registered")
        self._loops[loop.name] = loop
        return loop

    def get(self, name: str) -> Loop | None:
        return self._loops.get(name)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._loops.values()))

    def wake(self, name: str) -> None:
        loop = self._loops.get(name)
        if loop is not None:
            loop.wake()

    def start_all(self) -> None:
        for loop in self._loops.values():
            loop.start()

    async def stop_all(self) -> None:
        for loop in list(self._loops.values()):
            await loop.stop()
