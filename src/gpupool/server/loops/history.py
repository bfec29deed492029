"""The history loop: GPU utilization and memory into the store, rolled up and bounded.

Every telemetry sample (a `Frame`, handed over by the samplers' `on_frame`) is added to a
per-GPU, per-minute accumulator. Each pass (once a minute by default):

1. writes the minutes that have ended (`now` is past them) to the store as per-minute rows,
   merged with a row already there for the same minute;
2. rolls the per-minute rows of every hour that ended at least a minute ago up into hourly
   rows (an hour is rolled once; after a restart the loop carries on from the newest hourly
   row in the store);
3. prunes rows past their retention (`store.history.Retention`: minutes two days, hours 90
   days), which bounds the rows per GPU.

When the loop stops (the server shuts down), it writes what it holds, the minute in progress
included; a server started again within that minute adds to the same row. A failed write keeps
its minutes for the next pass; a crash loses at most the last pass's minutes. The clock is the
context's: tests call `run_once()` with a ManualClock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store.history import GpuPeriod, HistoryRepo, Retention
from gpupool.telemetry.sampler import Frame

log = logging.getLogger(__name__)
#: Minutes kept in memory per GPU when the store cannot be written (then the oldest go).
MAX_UNWRITTEN_MINUTES = 24 * 60


class _Acc:
    __slots__ = ("n", "sums", "counts", "maxes", "node")

    def __init__(self, node: str):
        self.n = 0
        self.sums = [0.0, 0.0, 0.0]  # util, memory MiB, power W
        self.counts = [0, 0, 0]
        self.maxes: list[float | None] = [None, None, None]  # util, memory, temperature
        self.node = node

    def add(self, util, mem, power, temp) -> None:  # type: ignore[no-untyped-def]
        self.n += 1
        for i, v in enumerate((util, mem, power)):
            if v is not None:
                self.sums[i] += v
                self.counts[i] += 1
        for i, v in enumerate((util, mem, temp)):
            if v is not None:
                m = self.maxes[i]
                self.maxes[i] = v if m is None else max(m, v)

    def period(self, uuid: str, t: int) -> GpuPeriod:
        util, mem, power = (
            s / c if c else None for s, c in zip(self.sums, self.counts, strict=True)
        )
        return GpuPeriod(
            uuid,
            t,
            self.n,
            util=util,
            util_max=self.maxes[0],
            memory_mib=mem,
            memory_mib_max=self.maxes[1],
            power_w=power,
            temperature_c=self.maxes[2],
            node=self.node,
        )


class MinuteAccumulator:
    """Per (GPU, minute): the sums, counts and maxima of the samples. Thread-safe: frames
    arrive from the telemetry loop, `closed()` is called from the history loop."""

    def __init__(self, resolution_s: int = 60):
        self.resolution_s = resolution_s
        self._open: dict[tuple[str, int], _Acc] = {}
        self._lock = threading.Lock()

    def add(self, frame: Frame) -> None:
        snap = frame.snapshot
        t = int(snap.timestamp // self.resolution_s) * self.resolution_s
        with self._lock:
            for g in snap.gpus:
                if not g.healthy:
                    continue
                acc = self._open.get((g.uuid, t))
                if acc is None:
                    acc = self._open[(g.uuid, t)] = _Acc(snap.hostname)
                acc.add(g.util_gpu, g.memory_used_mib, g.power_w, g.temperature_c)

    def closed(self, now: float) -> list[GpuPeriod]:
        """Take the minutes that ended by `now`, oldest first."""
        with self._lock:
            done = sorted(k for k in self._open if k[1] + self.resolution_s <= now)
            return [self._open.pop(k).period(*k) for k in done]

    def put_back(self, periods: Iterable[GpuPeriod]) -> None:
        """Keep minutes whose write failed for the next pass (bounded per GPU)."""
        with self._lock:
            for p in periods:
                acc = self._open.setdefault((p.gpu_uuid, p.t), _Acc(p.node))
                # re-add the period as `samples` identical samples of its means
                for _ in range(p.samples):
                    acc.add(p.util, p.memory_mib, p.power_w, None)
                for i, v in enumerate((p.util_max, p.memory_mib_max, p.temperature_c)):
                    if v is not None:
                        m = acc.maxes[i]
                        acc.maxes[i] = v if m is None else max(m, v)
            per_gpu: dict[str, list[tuple[str, int]]] = {}
            for k in sorted(self._open, key=lambda k: k[1]):
                per_gpu.setdefault(k[0], []).append(k)
            for keys in per_gpu.values():
                for k in keys[: max(0, len(keys) - MAX_UNWRITTEN_MINUTES)]:
                    del self._open[k]


@dataclass
class HistoryReport:
    written: int = 0
    rolled_up: int = 0
    pruned: int = 0


class HistoryLoop(Loop):
    name = "history"

    def __init__(
        self,
        ctx: AppContext,
        samplers: Iterable = (),  # type: ignore[type-arg]
        *,
        retention: Retention | None = None,
        interval_s: float = 60.0,
    ):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.retention = retention or Retention()
        self.minutes = MinuteAccumulator(self.retention.fine_s)
        #: hourly rows exist up to here (exclusive); None: not read from the store yet
        self._rolled_until: int | None = None
        for s in samplers:
            self.watch(s)

    def watch(self, sampler) -> None:  # type: ignore[no-untyped-def]
        """Take every frame `sampler` produces from now on."""
        sampler.on_frame(self.minutes.add)

    async def stop(self) -> None:
        """Stop the loop, then write every minute it holds (the one in progress too)."""
        await super().stop()
        try:
            await asyncio.to_thread(self.flush)
        except Exception:  # noqa: BLE001 - shutting down: log, never block the exit
            log.exception("history: the last minutes could not be written")

    def flush(self) -> int:
        """Write every minute held now, ended or not (an unended one is merged later with
        the rest of its samples). Returns how many were written."""
        periods = self.minutes.closed(float("inf"))
        try:
            with self.ctx.store.write() as s:
                return HistoryRepo(s).add(periods, self.retention.fine_s)
        except Exception:
            self.minutes.put_back(periods)
            raise

    def run_once(self) -> HistoryReport:
        ret = self.retention
        now = self.ctx.clock.now()
        report = HistoryReport()
        periods = self.minutes.closed(now)
        # an hour is rolled up once its last minute has had a minute to arrive
        hour_end = int(now - ret.fine_s) // ret.coarse_s * ret.coarse_s
        try:
            with self.ctx.store.write() as s:
                repo = HistoryRepo(s)
                report.written = repo.add(periods, ret.fine_s)
                since = self._rolled_until
                if since is None:
                    newest = repo.newest(ret.coarse_s)
                    oldest = repo.oldest(ret.fine_s)
                    since = newest + ret.coarse_s if newest is not None else oldest
                if since is not None:
                    since = max(since, int(now) - ret.fine_keep_s)
                    if since < hour_end:
                        report.rolled_up = repo.rollup(
                            since, hour_end, fine_s=ret.fine_s, coarse_s=ret.coarse_s
                        )
                    since = max(since - since % ret.coarse_s, hour_end)
                report.pruned = repo.prune(now, ret)
        except Exception:
            self.minutes.put_back(periods)
            raise
        self._rolled_until = since
        return report
