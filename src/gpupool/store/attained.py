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

`recent_runs` reads the observations of the pool's run-length scale (relative service
levels, gpupool.scheduler.levelscale) with the same semantics: the workloads that started
lately, each with its attained GPU-seconds and whether its run finished.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from gpupool.domain import ACTIVE_STATES, Allocation, Workload, WorkloadState
from gpupool.store.db import in_chunks
from gpupool.store.rows import AllocationRow, ShareRow, WorkloadRow

S = WorkloadState
#: the workloads the scheduler sees: waiting, or holding an allocation
SCHEDULED_STATES = frozenset({S.PENDING, *ACTIVE_STATES})
#: milli-GPU-seconds in a GPU-hour
MILLI_S_PER_GPU_HOUR = 1000.0 * 3600.0
#: a run that ended in one of these states, while it ran, finished (an event of the
#: run-length estimate, `recent_runs`); any other run is right-censored
FINISHED_STATES = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.CULLED})
#: `released_as` of an attempt whose start did not take (it never ran)
_NOT_STARTED = str(S.PENDING)
_PREEMPTED = str(S.PREEMPTED)


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


def recent_runs(s: Session, window: int, now: float) -> list[tuple[float, bool]]:
    """(GPU-seconds, finished) of the last `window` workloads to start, by first start (the
    order of their first attempt that took, i.e. of allocation ids; CPU-only work left out):
    the observations `gpupool.scheduler.levelscale.LevelScale` estimates the pool's
    run-length scale from. A run's GPU-seconds are its kept attempts (checkpointing work
    preempted, see the module docstring) and its current attempt (to `now`) or, once it has
    ended, its last one; a run waiting again after a preemption has only what it kept. It
    *finished* when the workload ended in a `FINISHED_STATES` state after running (its last
    attempt ended with it); running, waiting again, preempted for good or lost: censored.
    Two queries: the window (a walk down the allocations by id, stopping after `window`
    first attempts), then the window's attempts."""
    if window <= 0:
        return []
    a, b = aliased(AllocationRow), aliased(AllocationRow)
    earlier = select(b.id).where(
        b.workload_id == a.workload_id,
        b.id < a.id,
        or_(b.released_as.is_(None), b.released_as != _NOT_STARTED),
    )
    on_gpus = select(ShareRow.id).where(ShareRow.allocation_id == a.id, ShareRow.milli > 0)
    firsts = (
        select(a.workload_id)
        .where(
            or_(a.released_as.is_(None), a.released_as != _NOT_STARTED),
            ~exists(earlier),
            exists(on_gpus),
        )
        .order_by(a.id.desc())
        .limit(window)
    )
    ids = list(s.execute(firsts).scalars())
    held = func.coalesce(func.sum(ShareRow.milli), 0)
    rows = []
    for part in in_chunks(ids):
        q = (
            select(
                WorkloadRow.id,
                WorkloadRow.state,
                WorkloadRow.checkpointing,
                WorkloadRow.started_at,
                AllocationRow.id,
                AllocationRow.since,
                AllocationRow.released_at,
                AllocationRow.released_as,
                held,
            )
            .join(AllocationRow, AllocationRow.workload_id == WorkloadRow.id)
            .outerjoin(ShareRow, ShareRow.allocation_id == AllocationRow.id)
            .where(
                WorkloadRow.id.in_(part),
                or_(
                    AllocationRow.released_as.is_(None),
                    AllocationRow.released_as != _NOT_STARTED,
                ),
            )
            .group_by(
                WorkloadRow.id,
                WorkloadRow.state,
                WorkloadRow.checkpointing,
                WorkloadRow.started_at,
                AllocationRow.id,
                AllocationRow.since,
                AllocationRow.released_at,
                AllocationRow.released_as,
            )
        )
        rows.extend(s.execute(q))
    rows.sort(key=lambda r: r[4])  # each workload's attempts in order
    #: workload id -> [state, started_at, kept, last attempt's (released_as, end, milli-s)]
    runs: dict[str, list] = {}
    for wid, state, ckpt, started, _, since, end, released_as, milli in rows:
        spent = max(0.0, (now if end is None else end) - since) * float(milli)
        run = runs.setdefault(wid, [state, started, 0.0, None])
        if ckpt and released_as == _PREEMPTED:
            run[2] += spent
            spent = 0.0  # (kept)
        run[3] = (released_as, end, spent)
    out: list[tuple[float, bool]] = []
    for state, started, kept, (released_as, end, spent) in runs.values():
        if end is not None and state == str(S.PENDING):
            spent = 0.0  # waiting again: only what it kept (work without checkpoints restarts)
        done = (
            end is not None
            and started is not None
            and released_as == state
            and S(state) in FINISHED_STATES
        )
        out.append(((kept + spent) / 1000.0, done))
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
