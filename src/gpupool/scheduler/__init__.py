"""Pure scheduling core: snapshot + pending -> decisions. No I/O.

Use `cycle(snapshot, pending, now, config, cache)`; see docs/scheduler.md for the rules. A
`SchedulerCache` (owned by the caller) carries work over between cycles.
"""

from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.cycle import cycle
from gpupool.scheduler.types import (
    Admission,
    CycleStats,
    Decisions,
    PendingInfo,
    Policy,
    Preemption,
    RunningWorkload,
    SchedulerConfig,
    Snapshot,
)

__all__ = [
    "Admission",
    "CycleStats",
    "Decisions",
    "PendingInfo",
    "Policy",
    "Preemption",
    "RunningWorkload",
    "SchedulerCache",
    "SchedulerConfig",
    "Snapshot",
    "cycle",
]
