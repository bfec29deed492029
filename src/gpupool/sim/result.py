"""What a replay gives (gpupool.sim.engine): a record of what happened to each workload,
per-tenant time integrals, and the run's totals and samples, which gpupool.sim.metrics
turns into the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain import Allocation, Workload, WorkloadState


@dataclass(slots=True)
class WorkloadRecord:
    """What happened to one workload during the replay."""

    workload: Workload
    duration: float
    first_start: float | None = None
    last_start: float | None = None
    run_time: float = 0.0  # seconds spent running, all attempts
    progress: float = 0.0  # seconds of `duration` done and kept (checkpointing work)
    service: float = 0.0  # milli-GPU-seconds attained in earlier attempts and kept
    allocation: Allocation | None = None  # the last one held
    epoch: int = 0  # bumps on preemption, so a stale completion event is ignored
    reason: str | None = None  # last pending/unschedulable reason

    @property
    def state(self) -> WorkloadState:
        return self.workload.state


@dataclass(slots=True)
class TenantTimeline:
    """Per-tenant time integrals (milli-GPU-seconds) over the replay."""

    allocated: float = 0.0
    fair: float = 0.0
    owed: float = 0.0  # min(guarantee, demand) integrated
    owed_met: float = 0.0  # min(allocated, guarantee, demand) integrated
    #: min(guarantee, allocated + waiting work that fits in the rest of it) integrated
    owed_fit: float = 0.0
    owed_fit_met: float = 0.0  # min(allocated, owed_fit) integrated


@dataclass(slots=True)
class SimResult:
    records: dict[str, WorkloadRecord]
    capacity_milli: int
    tenants: list[str]
    guarantees: dict[str, int]
    integrals: dict[str, TenantTimeline]
    first_submit: float | None
    last_end: float | None
    allocation_ratio_at_last_submit: float | None
    cycle_ms: list[float]
    preemptions: int
    events: int
    #: (time, {tenant: allocated milli}, {tenant: fair share milli}, pending count) samples
    samples: list[tuple[float, dict[str, int], dict[str, float], int]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def stuck(self) -> list[WorkloadRecord]:
        """Workloads still pending when nothing more could happen."""
        return [r for r in self.records.values() if r.state is WorkloadState.PENDING]
