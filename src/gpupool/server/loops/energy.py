"""The energy loop (chargeback, issue 35): joules per workload and UTC day from the GPUs'
energy counters (NVML `nvmlDeviceGetTotalEnergyConsumption`, DCGM's total energy: mJ since
the driver loaded, only ever up).

It listens to this process's telemetry samplers: for each frame, each GPU's counter moved
by some joules since the previous frame; they are split between the allocations holding a
share of that GPU in that frame, by share (a whole GPU's holder gets all of it, half a GPU's
holder half; what no allocation holds is counted to nobody). Each pass writes what gathered
since the last one. A counter that went down (a driver reload) or a GPU seen for the first
time starts afresh: that interval is not counted. Not counted either: what gathered after
the last pass before a stop, and the first interval after a restart (at most a pass and a
sampling interval), and GPUs that only node agents report (their reports carry no energy
yet): the chargeback says `n/a` where no energy was recorded at all.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gpupool.server.context import AppContext
from gpupool.server.loops.accounting import split_by_day
from gpupool.server.loops.base import Loop
from gpupool.store import WorkloadRepo
from gpupool.store.energy import EnergyRepo
from gpupool.store.errors import NotFound
from gpupool.telemetry.sampler import Frame, Sampler


class EnergyLoop(Loop):
    name = "energy"

    def __init__(self, ctx: AppContext, samplers: Sequence[Sampler], *, interval_s: float = 60.0):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self._lock = threading.Lock()
        #: GPU uuid -> (counter mJ, time) of the previous frame
        self._last: dict[str, tuple[int, float]] = {}
        #: (workload id, day) -> [joules, GPU-seconds]
        self._gathered: dict[tuple[str, str], list[float]] = {}
        for s in samplers:
            s.on_frame(self.on_frame)

    def on_frame(self, frame: Frame) -> None:
        """Split each GPU's energy since the previous frame between its holders by share."""
        t = frame.snapshot.timestamp if frame.snapshot.gpus else self.ctx.clock.now()
        shares: dict[str, list[tuple[str, float]]] = {}
        for a in frame.allocations:
            for sh in a.shares:
                shares.setdefault(sh.gpu_uuid, []).append((a.workload_id, sh.milli / 1000))
        with self._lock:
            for g in frame.snapshot.gpus:
                if g.energy_mj is None:
                    continue
                now_t = g.timestamp or t
                prev = self._last.get(g.uuid)
                self._last[g.uuid] = (g.energy_mj, now_t)
                if prev is None or g.energy_mj < prev[0] or now_t <= prev[1]:
                    continue
                joules = (g.energy_mj - prev[0]) / 1000.0
                for wid, frac in shares.get(g.uuid, ()):
                    span = now_t - prev[1]
                    for day, secs in split_by_day(prev[1], now_t):
                        acc = self._gathered.setdefault((wid, day), [0.0, 0.0])
                        acc[0] += joules * frac * secs / span
                        acc[1] += frac * secs

    def run_once(self) -> int:
        """Write what gathered since the last pass; how many (workload, day) rows."""
        with self._lock:
            todo, self._gathered = self._gathered, {}
        if not todo:
            return 0
        with self.ctx.store.write() as s:
            repo, workloads = EnergyRepo(s), WorkloadRepo(s)
            for (wid, day), (joules, secs) in sorted(todo.items()):
                try:
                    w = workloads.get(wid)
                except NotFound:
                    continue
                repo.add(
                    workload_id=wid,
                    tenant=w.tenant,
                    user=w.owner,
                    day=day,
                    joules=joules,
                    gpu_seconds=secs,
                )
        return len(todo)
