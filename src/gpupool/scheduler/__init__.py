"""Pure scheduling core: snapshot + pending -> decisions. No I/O.

Use `cycle(snapshot, pending, now, config)`; see docs/scheduler.md for the rules.
"""

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
    "SchedulerConfig",
    "Snapshot",
    "cycle",
]
