"""The pool's run-length scale for relative service levels (issue 32, session 16).

`SchedulerConfig.service_levels_relative` makes the service-level thresholds multiples of a
quantile of how long the pool's runs are (GPU-seconds over all attempts of a workload). A
quantile of the runs that *finished* lately is biased to short runs (the long ones are
still running, or were preempted and wait) and swings with every clump of short runs. Here
the observations are the runs *started* lately (a window of the last `window` starts, each
counted once): a finished run is an event at its GPU-seconds, a run still running or stopped
(preempted, waiting again) is right-censored at what it attained so far. The Kaplan-Meier
estimate of the survival function uses both, and its `quantile` is the scale. When the
window's longest follow-up is too short to reach the quantile (the estimate never falls to
1 - q), there is no estimate and the scale stays as it was.

`LevelScale` keeps the scale across cycles: it moves only when a new estimate differs from
it by more than `SchedulerConfig.service_levels_hysteresis` (a factor, either way), so the
ladder changes a few times a day, not with every run. The caller owns one, feeds it
observations at most every `ESTIMATE_EVERY_S` and passes its `scale` in
`Snapshot.service_scale`: the simulator from the runs it replays (gpupool.sim.relative), the
server's scheduler loop from its store (`gpupool.store.attained.recent_runs`). CPU-only work
is not a run here (it attains no GPU-seconds). Pure functions and a small value holder; no
I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

#: fewer finished runs (events) than this in the window: no estimate
MIN_EVENTS = 50
#: seconds between two estimates of the scale (an estimate reads the whole window)
ESTIMATE_EVERY_S = 300.0


def km_quantile(observations: Iterable[tuple[float, bool]], q: float) -> float | None:
    """The `q` quantile of the Kaplan-Meier estimate from (value, finished) pairs: the
    smallest finished value at which the estimated survival S(t) falls to 1 - q or below.
    Unfinished values are right-censored (still at risk at their own value, as is usual
    for ties). None when the estimate never falls that far (too little follow-up) or there
    is no finished value."""
    obs = sorted(observations, key=lambda o: (o[0], not o[1]))  # events before censored
    at_risk = len(obs)
    target = 1.0 - q
    surv = 1.0
    i = 0
    while i < len(obs):
        value = obs[i][0]
        events = gone = 0
        while i < len(obs) and obs[i][0] == value:
            events += obs[i][1]
            gone += 1
            i += 1
        if events:
            surv *= 1.0 - events / at_risk
            if surv <= target + 1e-12:
                return value
        at_risk -= gone
    return None


class LevelScale:
    """The scale (GPU-seconds) a caller passes in `Snapshot.service_scale`, with hysteresis."""

    __slots__ = ("scale", "changes")

    def __init__(self) -> None:
        #: GPU-seconds; 0 until the first estimate (the absolute levels apply)
        self.scale = 0.0
        #: how many times the scale moved (reported by replays)
        self.changes = 0

    def update(
        self, observations: Iterable[tuple[float, bool]], quantile: float, hysteresis: float
    ) -> bool:
        """Estimate again from `observations` ((GPU-seconds, finished) of recently started
        runs); move the scale when the estimate is beyond `hysteresis` of it. True if it
        moved."""
        obs = list(observations)
        if sum(1 for _, done in obs if done) < MIN_EVENTS:
            return False
        est = km_quantile(obs, min(1.0, max(0.0, quantile)))
        if est is None or est <= 0:
            return False
        h = max(1.0, hysteresis)
        if self.scale > 0 and self.scale / h <= est <= self.scale * h:
            return False
        self.scale = est
        self.changes += 1
        return True
