"""Runtime estimates for start-time forecasts (gpupool.sim.forecast): how much longer a
workload will run, learned from past runs of the same shape.

The estimate of a workload, in this order (docs/scheduler.md, "Forecasts"):

1. the run times of the last `last_n` (200) finished runs of the same user and shape, if
   there are at least `min_runs` (3) of them;
2. else those of the same tenant and shape;
3. else a default (`default_s`, 1 h typical, `default_long_s`, 4 h long).

A shape is the kind (job or notebook) and the GPUs asked for in all (1, 0.5, 2 x 8...).
From the samples, `typical` is the median (p50) and `long` the p90 (nearest rank): robust
to a few runs that hang for days. For running work that has run `elapsed` seconds, only
the samples longer than that count (what is left of runs that lasted at least this long);
if fewer than `min_runs` are, what is left is taken as a quarter of its elapsed time
(typical, at least a minute) to all of it again (long): the longer heavy-tailed work has
run, the longer it goes on. A declared max runtime bounds both: nothing runs past it.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.domain import Workload, WorkloadKind

DEFAULT_TYPICAL_S = 3600.0
DEFAULT_LONG_S = 4 * 3600.0


@dataclass(frozen=True, slots=True)
class PastRun:
    """One finished run: who, what shape, how long it ran (seconds)."""

    owner: str
    tenant: str
    kind: WorkloadKind
    gpu_milli: int
    run_s: float


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """Seconds still to run: `typical` (p50) and `long` (p90); `basis` says from what."""

    typical_s: float
    long_s: float
    basis: str
    #: what the estimate came from: declared, user, tenant or default
    source: str


def shape_text(kind: WorkloadKind, gpu_milli: int) -> str:
    """'1-GPU jobs', '0.5-GPU notebooks', 'CPU-only jobs'."""
    what = "notebooks" if kind is WorkloadKind.NOTEBOOK else "jobs"
    if gpu_milli <= 0:
        return f"CPU-only {what}"
    return f"{gpu_milli / 1000:g}-GPU {what}"


def _duration(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    if s >= 60:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def _quantile(sorted_samples: list[float], q: float) -> float:
    """Nearest-rank quantile of a non-empty sorted list."""
    i = min(len(sorted_samples) - 1, max(0, int(q * len(sorted_samples) + 0.5) - 1))
    return sorted_samples[i]


class RuntimeEstimator:
    """Estimates from `history` (oldest first; the last `last_n` runs per key are kept)."""

    def __init__(
        self,
        history: Iterable[PastRun] = (),
        *,
        last_n: int = 200,
        min_runs: int = 3,
        default_s: float = DEFAULT_TYPICAL_S,
        default_long_s: float = DEFAULT_LONG_S,
        long_quantile: float = 0.9,
    ):
        self.last_n = last_n
        self.long_quantile = long_quantile
        self.min_runs = min_runs
        self.default_s = default_s
        self.default_long_s = max(default_s, default_long_s)
        self._by_user: dict[tuple[str, WorkloadKind, int], deque[float]] = {}
        self._by_tenant: dict[tuple[str, WorkloadKind, int], deque[float]] = {}
        self._sorted: dict[tuple[str, WorkloadKind, int], list[float]] = {}
        for run in history:
            self.add(run)

    def add(self, run: PastRun) -> None:
        """Learn one more finished run (the newest)."""
        for table, who in ((self._by_user, run.owner), (self._by_tenant, run.tenant)):
            key = (who, run.kind, run.gpu_milli)
            q = table.get(key)
            if q is None:
                q = table[key] = deque(maxlen=self.last_n)
            q.append(run.run_s)
        self._sorted.clear()

    def _samples(self, w: Workload) -> tuple[list[float], str, str]:
        kind, milli = w.kind, w.request.total_gpu_milli
        shape = shape_text(kind, milli)
        for table, who, whose, source in (
            (self._by_user, w.owner, f"{w.owner}'s", "user"),
            (self._by_tenant, w.tenant, f"{w.tenant}'s", "tenant"),
        ):
            q = table.get((who, kind, milli))
            if q is not None and len(q) >= self.min_runs:
                key = (("u:" if source == "user" else "t:") + who, kind, milli)
                s = self._sorted.get(key)
                if s is None:
                    s = self._sorted[key] = sorted(q)
                return s, f"{len(q)} past runs of {whose} {shape}", source
        return [], f"no past runs of {shape}", "default"

    def estimate(self, w: Workload, elapsed_s: float = 0.0) -> RuntimeEstimate:
        """What is left of `w`'s run after `elapsed_s` seconds (0: it has not started)."""
        samples, basis, source = self._samples(w)
        if samples:
            longer = samples[bisect_right(samples, elapsed_s) :] if elapsed_s > 0 else samples
            if len(longer) >= min(self.min_runs, len(samples)):
                typical = _quantile(longer, 0.5) - elapsed_s
                long = _quantile(longer, self.long_quantile) - elapsed_s
            else:
                typical = max(60.0, elapsed_s / 4)
                long = max(typical, elapsed_s)
                basis += ", nearly all shorter than it has run"
        else:
            typical = max(60.0, self.default_s - elapsed_s) if elapsed_s else self.default_s
            long = max(typical, self.default_long_s - elapsed_s)
            basis = f"a default of {_duration(self.default_s)} ({basis})"
        if w.max_runtime_s is not None:
            left = max(0.0, w.max_runtime_s - elapsed_s)
            if source == "default" or left < long:
                long = left
                typical = min(typical, left) if source != "default" else left
                if source == "default":
                    basis, source = f"its max runtime of {_duration(w.max_runtime_s)}", "declared"
        return RuntimeEstimate(max(0.0, typical), max(0.0, typical, long), basis, source)
