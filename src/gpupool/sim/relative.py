"""What a replay keeps for relative service levels (SchedulerConfig.service_levels_relative).

The simulator's part of `gpupool.scheduler.levelscale`: the window of the last
`service_levels_window` workloads that started (each once, at its first start), the
GPU-seconds of those that finished, and the `LevelScale` it passes in
`Snapshot.service_scale`. The scale is estimated again at most every `EVERY_S` seconds of
replay time (an estimate reads the whole window), as the server's scheduler loop does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

from gpupool.scheduler.levelscale import ESTIMATE_EVERY_S, LevelScale
from gpupool.scheduler.types import RunningWorkload, SchedulerConfig
from gpupool.sim.result import WorkloadRecord

#: seconds of replay time between two estimates of the scale
EVERY_S = ESTIMATE_EVERY_S


class RelativeLevels:
    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.started: deque[str] = deque(maxlen=max(1, config.service_levels_window))
        #: the ids in `started`
        self.in_window: set[str] = set()
        #: workload id -> GPU-seconds over all its attempts, once it finished
        self.finished: dict[str, float] = {}
        self.scale = LevelScale()
        self.next_at = -float("inf")

    def start(self, wid: str) -> None:
        """`wid` started for the first time."""
        if len(self.started) == self.started.maxlen:
            gone = self.started[0]
            self.finished.pop(gone, None)
            self.in_window.discard(gone)
        self.started.append(wid)
        self.in_window.add(wid)

    def finish(self, wid: str, gpu_s: float) -> None:
        """`wid` finished having attained `gpu_s` GPU-seconds (kept only while in the window)."""
        if wid in self.in_window:
            self.finished[wid] = gpu_s

    def observations(
        self,
        records: Mapping[str, WorkloadRecord],
        running: Mapping[str, RunningWorkload],
        t: float,
    ) -> Iterator[tuple[float, bool]]:
        """(GPU-seconds, finished) of each run in the window: finished runs as they ended,
        the others censored at what they attained (kept service, and the current attempt)."""
        for wid in self.started:
            done = self.finished.get(wid)
            if done is not None:
                yield done, True
                continue
            rec = records[wid]
            service = rec.service
            rw = running.get(wid)
            if rw is not None and rec.last_start is not None:
                service += (t - rec.last_start) * rw.allocation.gpu_milli
            yield service / 1000.0, False

    def update(
        self,
        records: Mapping[str, WorkloadRecord],
        running: Mapping[str, RunningWorkload],
        t: float,
    ) -> bool:
        """Estimate again if due; True if the scale moved."""
        if t < self.next_at:
            return False
        self.next_at = t + EVERY_S
        c = self.config
        obs = self.observations(records, running, t)
        return self.scale.update(obs, c.service_levels_quantile, c.service_levels_hysteresis)
