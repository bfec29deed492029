"""Attained service of workloads: the GPU-time (milli-GPU-seconds) a workload has had.

A workload's *attempts* are its allocations, from `since` to `released_at`. An attempt that
ended in a preemption (`released_as` = "preempted") is **kept** when the workload declares
`checkpointing`: it resumes from its checkpoint, so the GPU-time counts on when it is
requeued. Work without checkpointing restarts from scratch and starts again at 0; attempts
that ended otherwise (a start that did not take, work admitted but never launched) are not
kept either. These are the simulator's semantics (gpupool.sim.engine), which pass the kept
service in `Snapshot.attained_service` under the workload id.

`kept_service` reads the kept service of many workloads in one query; `attained_milli_s`
adds the current (or, once ended, the last) attempt, `attempt_milli_s`, for what users are
shown: the attained service is `kept + attempt`.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain import ACTIVE_STATES, Allocation, Workload, WorkloadState
from gpupool.store.db import in_chunks
from gpupool.store.rows import AllocationRow, ShareRow, WorkloadRow

S = WorkloadState
#: the workloads the scheduler sees: waiting, or holding an allocation
SCHEDULED_STATES = frozenset({S.PENDING, *ACTIVE_STATES})
#: milli-GPU-seconds in a GPU-hour
MILLI_S_PER_GPU_HOUR = 1000.0 * 3600.0


def kept_service(
    s: Session,
    *,
    states: Collection[WorkloadState] = SCHEDULED_STATES,
    workload_ids: Collection[str] | None = None,
) -> dict[str, float]:
    """Workload id -> milli-GPU-seconds of its ended attempts that it keeps (see the module
    docstring), for the workloads in `states` (or, with `workload_ids`, for those). Only
    workloads with some kept service are listed. One query (per 500 ids): it starts from
    the workloads that declare checkpointing and were preempted, so thousands of pending
    workloads that never ran cost an index range scan."""
    held = func.sum((AllocationRow.released_at - AllocationRow.since) * ShareRow.milli)
    # the workloads first (a subquery: the allocations table keeps every attempt ever made,
    # so the plan must not start from it), then their allocations by index
    which = select(WorkloadRow.id).where(
        WorkloadRow.checkpointing.is_(True), WorkloadRow.preemptions > 0
    )
    if workload_ids is None:
        whiches = [which.where(WorkloadRow.state.in_([str(x) for x in states]))]
    else:
        ids = list(workload_ids)
        whiches = [which.where(WorkloadRow.id.in_(part)) for part in in_chunks(ids)]
    batches = [
        select(AllocationRow.workload_id, held)
        .join(ShareRow, ShareRow.allocation_id == AllocationRow.id)
        .where(
            AllocationRow.workload_id.in_(w.scalar_subquery()),
            AllocationRow.released_as == str(S.PREEMPTED),
        )
        .group_by(AllocationRow.workload_id)
        for w in whiches
    ]
    out: dict[str, float] = {}
    for b in batches:
        for wid, milli_s in s.execute(b):
            if milli_s:
                out[wid] = float(milli_s)
    return out


def attained_milli_s(
    w: Workload, kept: float = 0.0, active: Allocation | None = None, now: float = 0.0
) -> float:
    """What `w` has attained, milli-GPU-seconds: `kept` (its `kept_service`) plus
    `attempt_milli_s`."""
    return kept + attempt_milli_s(w, active, now)


def attempt_milli_s(w: Workload, active: Allocation | None = None, now: float = 0.0) -> float:
    """The part of `w`'s attained service that is not kept: while it holds `active`, the
    GPU-time since that allocation began (as the scheduler counts it); once it has ended, its
    last attempt (admission to end, at the GPUs it asked for); 0 while it waits, and for
    ended checkpointing work whose last attempt was preempted (that one is kept)."""
    if w.state in ACTIVE_STATES:
        return 0.0 if active is None else max(0.0, now - active.since) * active.gpu_milli
    if w.state is S.PENDING or w.admitted_at is None or w.finished_at is None:
        return 0.0
    if w.state is S.PREEMPTED and w.checkpointing:
        return 0.0
    return max(0.0, w.finished_at - w.admitted_at) * w.request.total_gpu_milli


def gpu_hours(milli_s: float) -> float:
    """Milli-GPU-seconds as GPU-hours, to 1/10000 (0.36 GPU-seconds)."""
    return round(milli_s / MILLI_S_PER_GPU_HOUR, 4)
