"""The sampler: reads a source on an interval, attributes processes, polices, keeps history.

Per GPU: the last hour at the sampling interval (1 s by default) and the last week at one
point per minute (the mean of that minute). Per process: the last `process_points` samples
and per-minute means for `process_minutes`. Every buffer is a bounded ring. The clock is
injected; tests call `sample_once()` and move a `ManualClock`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gpupool.clock import Clock, SystemClock
from gpupool.domain import Allocation
from gpupool.telemetry.attribution import Attribution, Attributor
from gpupool.telemetry.policing import Detection, Policer
from gpupool.telemetry.snapshots import HostSnapshot
from gpupool.telemetry.source import GPUSource

log = logging.getLogger(__name__)


class GPUPoint(NamedTuple):
    t: float
    util: float | None
    memory_used_mib: float | None
    power_w: float | None
    temperature_c: float | None


class ProcessPoint(NamedTuple):
    t: float
    memory_mib: float | None
    sm_util: float | None


@dataclass(frozen=True, slots=True)
class Frame:
    """One sample: the snapshot, who owns each process, and what policing detected."""

    snapshot: HostSnapshot
    owners: dict[int, Attribution] = field(default_factory=dict)
    detections: tuple[Detection, ...] = ()
    allocations: tuple[Allocation, ...] = ()


class _Minute:
    """Averages points that fall into one minute, then emits one point."""

    __slots__ = ("minute", "n", "sums", "counts")

    def __init__(self, minute: int, width: int):
        self.minute = minute
        self.n = width
        self.sums = [0.0] * width
        self.counts = [0] * width

    def add(self, values: Sequence[float | None]) -> None:
        for i, v in enumerate(values):
            if v is not None:
                self.sums[i] += v
                self.counts[i] += 1

    def point(self) -> list[float | None]:
        return [s / c if c else None for s, c in zip(self.sums, self.counts, strict=True)]


class Series:
    """A fine ring (every sample) and a coarse ring (per-minute means) of fixed size."""

    def __init__(self, fine: int, coarse: int, minute_s: float = 60.0):
        self.fine: deque[tuple] = deque(maxlen=fine)
        self.coarse: deque[tuple] = deque(maxlen=coarse)
        self.minute_s = minute_s
        self._open: _Minute | None = None
        self.last_t = 0.0

    def add(self, t: float, values: Sequence[float | None]) -> None:
        self.last_t = t
        self.fine.append((t, *values))
        minute = int(t // self.minute_s)
        if self._open is not None and self._open.minute != minute:
            self._flush()
        if self._open is None:
            self._open = _Minute(minute, len(values))
        self._open.add(values)

    def _flush(self) -> None:
        if self._open is not None:
            self.coarse.append((self._open.minute * self.minute_s, *self._open.point()))
            self._open = None


class Sampler:
    """Samples `source` every `interval_s`; keeps rings; exposes the latest `Frame`.

    `allocations` returns what workloads hold on this node (for policing); `attributor`
    and `policer` are optional so a bare exporter can run with neither.
    """

    def __init__(
        self,
        source: GPUSource,
        clock: Clock | None = None,
        interval_s: float = 1.0,
        attributor: Attributor | None = None,
        policer: Policer | None = None,
        allocations: Callable[[], Sequence[Allocation]] | None = None,
        gpu_fine_points: int = 3600,
        gpu_minutes: int = 7 * 24 * 60,
        process_points: int = 600,
        process_minutes: int = 24 * 60,
        forget_process_after_s: float = 3600.0,
    ):
        if interval_s <= 0:
            raise ValueError(f"sampling interval must be > 0 s, got {interval_s}")
        self.source = source
        self.clock = clock or SystemClock()
        self.interval_s = interval_s
        self.attributor = attributor
        self.policer = policer
        self.allocations = allocations or (lambda: ())
        self._gpu_sizes = (gpu_fine_points, gpu_minutes)
        self._proc_sizes = (process_points, process_minutes)
        self.forget_process_after_s = forget_process_after_s
        self.gpus: dict[str, Series] = {}
        self.processes: dict[tuple[str, int], Series] = {}
        self.latest: Frame | None = None
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Frame], None]] = []

    def on_frame(self, listener: Callable[[Frame], None]) -> None:
        """Call `listener(frame)` after every sample (the server's telemetry loop hooks in)."""
        self._listeners.append(listener)

    def sample_once(self) -> Frame:
        """Read the source once, update the rings, and return the frame."""
        snap = self.source.snapshot()
        t = self.clock.now()
        pids = {p.pid for p in snap.processes}
        owners = self.attributor.attribute_all(pids) if self.attributor else {}
        allocs = tuple(self.allocations())
        detections = tuple(self.policer.check(snap, owners, allocs)) if self.policer else ()
        frame = Frame(snap, owners, detections, allocs)
        with self._lock:
            for g in snap.gpus:
                series = self.gpus.get(g.uuid)
                if series is None:
                    series = self.gpus[g.uuid] = Series(*self._gpu_sizes)
                series.add(t, (g.util_gpu, g.memory_used_mib, g.power_w, g.temperature_c))
            for p in snap.processes:
                key = (p.gpu_uuid, p.pid)
                ps = self.processes.get(key)
                if ps is None:
                    ps = self.processes[key] = Series(*self._proc_sizes)
                ps.add(t, (p.used_memory_mib, p.sm_util))
            horizon = t - self.forget_process_after_s
            stale = [k for k, s in self.processes.items() if s.last_t < horizon]
            for k in stale:
                del self.processes[k]
            self.latest = frame
        for listener in self._listeners:
            listener(frame)
        return frame

    def gpu_history(self, uuid: str, per_minute: bool = False) -> list[GPUPoint]:
        """The GPU's points, oldest first: every sample (last hour) or per-minute (last week)."""
        with self._lock:
            s = self.gpus.get(uuid)
            rows = [] if s is None else list(s.coarse if per_minute else s.fine)
        return [GPUPoint(*r) for r in rows]

    def process_history(self, gpu_uuid: str, pid: int, per_minute: bool = False):
        """A process's points on one GPU, oldest first."""
        with self._lock:
            s = self.processes.get((gpu_uuid, pid))
            rows = [] if s is None else list(s.coarse if per_minute else s.fine)
        return [ProcessPoint(*r) for r in rows]

    def run(self, stop: threading.Event) -> None:
        """Sample every `interval_s` until `stop` is set (wall-clock waits; for services).

        If a sample was already taken (`latest`), the first one here waits an interval.
        """
        if self.latest is not None:
            stop.wait(self.interval_s)
        while not stop.is_set():
            started = self.clock.now()
            try:
                self.sample_once()
            except Exception:  # noqa: BLE001 - a bad sample must not stop the loop
                log.exception("telemetry sample failed; trying again next interval")
            elapsed = self.clock.now() - started
            stop.wait(max(0.0, self.interval_s - elapsed))
