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
from typing import Any

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
    A few queries: the window (a walk down the allocations by id, stopping after `window`
    first attempts), the attempts and their shares from the window's oldest first one on,
    the window's workloads (one query per 500)."""
    if window <= 0:
        return []
    first = _first_starts(s, window)
    if not first:
        return []
    # every attempt of the window's workloads is at or after the window's oldest first one:
    # ranges of the allocations' primary key and of the shares' allocation index, then the
    # workloads by key (joined, or by an IN list of the window's workloads, PostgreSQL's
    # planner may scan every allocation, share or workload: 60-200 ms at 120,000)
    low = min(first.values())
    attempts = select(
        AllocationRow.workload_id,
        AllocationRow.id,
        AllocationRow.since,
        AllocationRow.released_at,
        AllocationRow.released_as,
    ).where(
        AllocationRow.id >= low,
        or_(AllocationRow.released_as.is_(None), AllocationRow.released_as != _NOT_STARTED),
    )
    rows = [r for r in s.execute(attempts) if r[0] in first]
    by_allocation = (
        select(ShareRow.allocation_id, func.sum(ShareRow.milli))
        .where(ShareRow.allocation_id >= low)
        .group_by(ShareRow.allocation_id)
    )
    held: dict[int, float] = {aid: float(m or 0) for aid, m in s.execute(by_allocation)}
    workloads: dict[str, tuple[str, bool, float | None]] = {}
    for part in in_chunks(list(first)):
        of = select(
            WorkloadRow.id, WorkloadRow.state, WorkloadRow.checkpointing, WorkloadRow.started_at
        ).where(WorkloadRow.id.in_(part))
        for wid, state, ckpt, started in s.execute(of):
            workloads[wid] = (state, bool(ckpt), started)
    rows.sort(key=lambda r: r[1])  # each workload's attempts in order
    #: workload id -> [state, started_at, kept, last attempt's (released_as, end, milli-s)]
    runs: dict[str, list[Any]] = {}
    for wid, aid, since, end, released_as in rows:
        state, ckpt, started = workloads[wid]
        spent = max(0.0, (now if end is None else end) - since) * held.get(aid, 0.0)
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


def _first_starts(s: Session, window: int, page: int | None = None) -> dict[str, int]:
    """Workload id -> the id of its first attempt that took, for the last `window`
    workloads by it (CPU-only work left out). A walk down the allocations by primary key, a
    page of `2 * window` at a time, each row asked whether an earlier attempt of its workload
    took (a subquery per row, by index), then the page's range of shares for whether it holds
    GPUs: the cost follows the pages read, never the table (a NOT EXISTS join let
    PostgreSQL's planner hash every allocation and share, 0.5-0.8 s at 120,000)."""
    page = page or max(2 * window, 100)
    ran = or_(AllocationRow.released_as.is_(None), AllocationRow.released_as != _NOT_STARTED)
    out: dict[str, int] = {}
    below: int | None = None
    while len(out) < window:
        rows = select(AllocationRow.id, AllocationRow.workload_id).where(ran)
        if below is not None:
            rows = rows.where(AllocationRow.id < below)
        p = rows.order_by(AllocationRow.id.desc()).limit(page).subquery()
        b = aliased(AllocationRow)
        earlier = exists(
            select(b.id).where(
                b.workload_id == p.c.workload_id,
                b.id < p.c.id,
                or_(b.released_as.is_(None), b.released_as != _NOT_STARTED),
            )
        )
        q = select(p.c.id, p.c.workload_id, earlier).order_by(p.c.id.desc())
        got = list(s.execute(q))
        if not got:
            break
        lo, hi = got[-1][0], got[0][0]
        on_gpus = set(  # (a range of the shares' allocation index)
            s.execute(
                select(ShareRow.allocation_id)
                .where(
                    ShareRow.allocation_id >= lo,
                    ShareRow.allocation_id <= hi,
                    ShareRow.milli > 0,
                )
                .distinct()
            ).scalars()
        )
        for aid, wid, has_earlier in got:
            if not has_earlier and aid in on_gpus and len(out) < window:
                out[wid] = aid
        if len(got) < page:
            break
        below = lo
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
