"""Pure scheduling core: snapshot + pending -> decisions. No I/O."""

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
]
