"""Running work's life after admission: stopping it, and applying what the executor reports.

Shared by the API (cancel), the scheduler loop (preemption) and the reconciler, so that every
caller turns executor truth into workload states the same way:

- `request_stop(ctx, id, to, reason)`: asks the executor to end active work; the workload keeps
  its allocation (the scheduler sees it as `stopping`) until the work has really ended, then
  becomes `to` (`preempted` -> requeued as `pending` when allowed, `cancelled`, `culled`).
- `apply_status(session, record, status, now)`: one workload, one `ExecStatus`, inside the
  caller's write transaction. `settle(ctx, id)` polls and applies in one go.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from gpupool.domain import Workload, WorkloadState
from gpupool.engines.common.executor import ExecState, ExecStatus, ExecutorError
from gpupool.scheduler.followup import requeue_reason
from gpupool.server.context import AppContext
from gpupool.store import WorkloadRecord, WorkloadRepo

log = logging.getLogger(__name__)
S = WorkloadState


def apply_status(s: Session, rec: WorkloadRecord, status: ExecStatus, now: float) -> Workload:
    """Bring one active workload in line with `status`; return it as it now stands.

    Alive work: `starting` becomes `running` once the executor says so. Rejected work (the
    engine gave up starting it) is requeued as `pending` with the executor's reason. Ended work: the
    state a pending stop asked for, else succeeded/failed by exit code, else lost. Work the
    executor never heard of is lost once it was started (admitted work waits for its start).
    """
    repo = WorkloadRepo(s)
    w = rec.workload
    if not w.active:
        return w
    st = status.state
    if st.alive:
        if status.endpoint is not None and status.endpoint != rec.endpoint:
            repo.set_endpoint(w.id, status.endpoint)
        if st is ExecState.RUNNING and w.state is not S.RUNNING:
            if w.state is S.ADMITTED:
                w = repo.change_state(w.id, S.STARTING, now, "the executor launched it")
            w = repo.change_state(w.id, S.RUNNING, now, "the executor reports it running")
        elif st is ExecState.STARTING and w.state is S.ADMITTED:
            w = repo.change_state(w.id, S.STARTING, now, "the executor is starting it")
        return w
    if st is ExecState.UNKNOWN and w.state is S.ADMITTED and rec.stopping is None:
        return w  # not launched yet
    if st is ExecState.REJECTED and rec.stopping is None:
        return repo.change_state(w.id, S.PENDING, now, status.message or "the start did not take")
    if rec.stopping is not None:
        to, reason = rec.stopping
        if to is S.CULLED and w.state is S.ADMITTED:
            to = S.CANCELLED
        w = repo.change_state(w.id, to, now, reason, exit_code=status.exit_code)
        if to is S.PREEMPTED and w.requeue_on_preemption:
            w = repo.change_state(w.id, S.PENDING, now, requeue_reason(w))
        return w
    if w.state is S.ADMITTED:
        w = repo.change_state(w.id, S.STARTING, now, "the executor launched it")
    detail = f": {status.message}" if status.message else ""
    if st is ExecState.SUCCEEDED:
        return repo.change_state(w.id, S.SUCCEEDED, now, "exited with code 0", exit_code=0)
    if st is ExecState.FAILED:
        return repo.change_state(
            w.id, S.FAILED, now, f"the work failed{detail}", exit_code=status.exit_code
        )
    return repo.change_state(w.id, S.LOST, now, f"the executor lost track of the work{detail}")


def launch_steps(
    executor: str, status: ExecStatus | None
) -> tuple[tuple[WorkloadState, str], ...] | None:
    """The states an admitted workload the executor just took moves through, with their
    reasons, when its first poll said `status` (None: not visible yet): what `change_state`
    to `starting` then `apply_status` would write (store.LaunchRepo writes them in batches).
    None where `status` says the work already ended or was rejected: then the caller applies
    it one by one (`apply_status`). A test holds this to that path."""
    started = ((S.STARTING, f"started by the {executor} executor"),)
    if status is None or status.state is ExecState.STARTING:
        return started
    if status.state is ExecState.RUNNING:
        return (*started, (S.RUNNING, "the executor reports it running"))
    return None


def would_change(rec: WorkloadRecord, status: ExecStatus) -> bool:
    """Whether `apply_status(rec, status)` would change anything (False: skip the write).
    Mirrors apply_status's rules; a test holds the two together."""
    w, st = rec.workload, status.state
    if not w.active:
        return False
    if st.alive:
        return (
            (st is ExecState.RUNNING and w.state is not S.RUNNING)
            or (st is ExecState.STARTING and w.state is S.ADMITTED)
            or (status.endpoint is not None and status.endpoint != rec.endpoint)
        )
    return not (st is ExecState.UNKNOWN and w.state is S.ADMITTED and rec.stopping is None)


def settle(ctx: AppContext, workload_id: str, status: ExecStatus | None = None) -> Workload:
    """Poll the executor (unless `status` is given) and apply the result."""
    if status is None:
        status = ctx.executor.poll(workload_id)
    with ctx.store.write() as s:
        rec = WorkloadRepo(s).record(workload_id)
        return apply_status(s, rec, status, ctx.clock.now())


def request_stop(ctx: AppContext, workload_id: str, to: WorkloadState, reason: str) -> Workload:
    """Ask the executor to end active work; it becomes `to` once ended (maybe right away).

    Executor errors are logged, not raised: the stop request is stored, and the reconciler
    settles the workload when the executor reports the end."""
    with ctx.store.write() as s:
        WorkloadRepo(s).request_stop(workload_id, to, reason, ctx.clock.now())
    try:
        ctx.executor.stop(workload_id, reason, ctx.settings.stop_grace_s)
        return settle(ctx, workload_id)
    except ExecutorError:
        log.exception("stopping %s failed; the reconciler will retry", workload_id)
        with ctx.store.read() as s:
            return WorkloadRepo(s).get(workload_id)
