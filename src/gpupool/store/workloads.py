"""The workloads repository (allocations: `gpupool.store.allocations`).

`WorkloadRepo.change_state` is the one function that changes a workload's state: it locks
the row, applies `domain.transition()`, releases the allocation when the workload stops
holding one (`AllocationRepo.release`), and appends the event, all in the caller's
transaction.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import Row, Table, bindparam, delete, func, or_, select, update
from sqlalchemy.orm import Session

from gpupool.domain import (
    ACTIVE_STATES,
    Event,
    Workload,
    WorkloadState,
    transition,
)
from gpupool.scheduler.types import PendingInfo, Wait
from gpupool.sim.forecast import Forecast
from gpupool.sim.runtimes import PastRun
from gpupool.store.allocations import AllocationRepo
from gpupool.store.convert import (
    OWED_WAIT_PREFIX,
    event_to_row,
    forecast_from_json,
    forecast_to_json,
    wait_from_json,
    wait_to_json,
    workload_to_domain,
    workload_to_row,
)
from gpupool.store.db import in_chunks, plain_execute, plain_executemany
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import (
    DOMAIN_COLUMNS,
    NOTE_KEYS,
    WORKLOAD_COLUMNS,
    WorkloadEnvRow,
    WorkloadPodRow,
    WorkloadRow,
    domain_workload,
    plain_workload,
)
from gpupool.store.scoping import in_subtree, in_subtrees, starts_with

_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
#: ended states whose run time says how long such work runs (forecasts learn from them)
_RAN_STATES = (
    WorkloadState.SUCCEEDED,
    WorkloadState.FAILED,
    WorkloadState.CANCELLED,
    WorkloadState.CULLED,
)


def lock_workload_rows(s: Session, ids: Sequence[str]) -> dict[str, WorkloadRow]:
    """Workload id -> its row's `DOMAIN_COLUMNS` (`domain_workload`), for those of `ids` that
    exist, the rows locked (PostgreSQL) in id order (SQLite has no row locks: its write
    transaction excludes other writers)."""
    out: dict[str, WorkloadRow] = {}
    run = s.connection().execute
    for part in in_chunks(sorted(set(ids))):
        q = (
            select(*DOMAIN_COLUMNS)
            .where(WorkloadRow.id.in_(part))
            .order_by(WorkloadRow.id)
            .with_for_update()
        )
        for r in run(q):
            row = domain_workload(tuple(r))
            out[row.id] = row
    return out


def new_workload_id() -> str:
    """A short random id such as `w-4k9x2m7qpa`."""
    return "w-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """A stored workload with what the store keeps beside the domain fields."""

    workload: Workload
    name: str | None = None
    pending: PendingInfo | None = None
    executor_ref: str | None = None
    #: A stop asked of the executor, not yet confirmed: (state to become, reason).
    stopping: tuple[WorkloadState, str] | None = None
    #: Where the workload's server listens ("http://host:port"), as its executor reported.
    endpoint: str | None = None
    #: pending work: when it is expected to start (the forecast loop's latest pass)
    forecast: Forecast | None = None


def record_of(row: Sequence[object]) -> WorkloadRecord:
    """The record of one plain row from `WorkloadRepo.rows`."""
    return _record(plain_workload(row))


def _record(row: WorkloadRow) -> WorkloadRecord:
    pending = None
    if row.state == WorkloadState.PENDING and row.pending_reason is not None:
        pending = PendingInfo(
            reason=row.pending_reason,
            position=row.queue_position or 0,
            tenant_position=row.tenant_position or 0,
            wait=wait_from_json(row.pending_wait),
        )
    stopping = None
    if row.stop_state is not None:
        stopping = (WorkloadState(row.stop_state), row.stop_reason or "")
    forecast = None
    if pending is not None:
        forecast = forecast_from_json(row.pending_forecast)
    return WorkloadRecord(
        workload_to_domain(row),
        row.name,
        pending,
        row.executor_ref,
        stopping,
        row.endpoint,
        forecast,
    )


#: a pending workload's stored why-pending: (reason, position, tenant position, wait as JSON)
StoredInfo = tuple[str | None, int | None, int | None, str | None]
_INFO_COLUMNS = (
    WorkloadRow.pending_reason,
    WorkloadRow.queue_position,
    WorkloadRow.tenant_position,
    WorkloadRow.pending_wait,
)
_T = cast(Table, WorkloadRow.__table__)
#: one workload's why-pending, written only while it is pending (a cancel may have won)
_SET_INFO = (
    update(_T)
    .where(_T.c.id == bindparam("b_id"), _T.c.state == str(WorkloadState.PENDING))
    .values(
        pending_reason=bindparam("b_r"),
        queue_position=bindparam("b_p"),
        tenant_position=bindparam("b_t"),
        pending_wait=bindparam("b_w"),
    )
)


def info_columns(info: PendingInfo) -> StoredInfo:
    """`info` as its columns are stored (compare with `StoredInfo`s read back)."""
    wait = None if info.wait is None else wait_to_json(info.wait)
    return (info.reason, info.position, info.tenant_position, wait)


_by_b_id = itemgetter("b_id")


class WorkloadRepo:
    def __init__(self, s: Session):
        self.s = s

    def add(self, w: Workload, *, name: str | None = None, message: str | None = None) -> Workload:
        """Insert a new pending workload and its `workload.submitted` event."""
        if w.state is not WorkloadState.PENDING:
            raise Conflict(f"a new workload must be pending, not {w.state}")
        row = workload_to_row(w)
        row.name = name
        self.s.add(row)
        self.s.flush()
        self.s.add(
            event_to_row(
                Event(
                    at=w.submitted_at,
                    kind="workload.submitted",
                    message=message or f"{w.owner} asked for {w.request.describe()} in {w.tenant}",
                    workload_id=w.id,
                    tenant=w.tenant,
                    user=w.owner,
                    data={"to": "pending"},
                )
            )
        )
        return w

    def _row(self, workload_id: str, *, lock: bool = False) -> WorkloadRow:
        if lock and self.s.get_bind().dialect.name != "sqlite":
            # PostgreSQL: lock the row (SQLite's write transaction already excludes writers)
            q = select(WorkloadRow).where(WorkloadRow.id == workload_id).with_for_update()
            row = self.s.scalar(q)
        else:
            row = self.s.get(WorkloadRow, workload_id)
        if row is None:
            raise NotFound(f"no workload {workload_id!r}; list yours with GET /api/v1/workloads")
        return row

    def get(self, workload_id: str) -> Workload:
        return workload_to_domain(self._row(workload_id))

    def record(self, workload_id: str, *, lock: bool = False) -> WorkloadRecord:
        """The stored workload; `lock`: hold its row until the transaction ends."""
        return _record(self._row(workload_id, lock=lock))

    def list(self, **filters: Any) -> list[WorkloadRecord]:
        """Workloads matching all filters (see `rows`), as records."""
        return [record_of(r) for r in self.rows(**filters)]

    def rows(
        self,
        *,
        states: Collection[WorkloadState] | None = None,
        tenants: Iterable[str] | None = None,
        tenant: str | None = None,
        owner: str | None = None,
        kind: str | None = None,
        visible_to_user: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = True,
    ) -> list[Row[Any]]:
        """Plain result rows (every column of `workloads`, in `ROW_KEYS` order) of the
        workloads matching all filters. `tenants` keeps those subtrees (plus, with
        `visible_to_user`, that user's own workloads anywhere). For hot read paths that
        turn rows straight into output; `record_of` makes a record of one."""
        q = select(*WORKLOAD_COLUMNS)  # plain rows, not ORM objects: much cheaper for long lists
        if states:
            q = q.where(WorkloadRow.state.in_([str(s) for s in states]))
        if tenants is not None:
            scope = in_subtrees(WorkloadRow.tenant, tenants)
            if visible_to_user is not None:
                scope = or_(scope, WorkloadRow.owner == visible_to_user)
            q = q.where(scope)
        if tenant is not None:
            q = q.where(in_subtree(WorkloadRow.tenant, tenant))
        if owner is not None:
            q = q.where(WorkloadRow.owner == owner)
        if kind is not None:
            q = q.where(WorkloadRow.kind == kind)
        order = WorkloadRow.submitted_at.desc() if newest_first else WorkloadRow.submitted_at
        q = q.order_by(order, WorkloadRow.id).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        return list(self.s.execute(q))

    def pending(self) -> list[Workload]:
        """The pending workloads in queue order (submission, then id)."""
        return [workload_to_domain(domain_workload(v)) for _, v, _ in self.pending_rows()]

    def pending_rows(self) -> Sequence[tuple[int, tuple[Any, ...], StoredInfo]]:
        """Per pending workload, in the order of `pending()`: its version, the values of its
        `DOMAIN_COLUMNS` (`workload_to_domain(domain_workload(values))` is what `pending()`
        gives) and its stored why-pending (see `set_pending_info`). For the scheduler loop's
        first read (later ones: `pending_versions`, then `domain_rows`). Read past the ORM,
        after a flush (`plain_execute`)."""
        q = (
            select(WorkloadRow.version, *DOMAIN_COLUMNS, *_INFO_COLUMNS)
            .where(WorkloadRow.state == str(WorkloadState.PENDING))
            .order_by(WorkloadRow.submitted_at, WorkloadRow.id)
        )
        n = len(DOMAIN_COLUMNS) + 1
        rows = plain_execute(self.s)(q)  # plain rows (flushed first: see plain_execute)
        return [(r[0], tuple(r[1:n]), tuple(r[n:])) for r in rows]

    def pending_versions(self) -> list[tuple[str, int, StoredInfo]]:
        """Per pending workload, in the order of `pending()`: its id, its version
        (`WorkloadRow.version`: equal versions, equal domain columns) and its stored
        why-pending. For the scheduler loop, which reads the domain columns (`domain_rows`)
        only of the workloads whose version moved. Read past the ORM, after a flush."""
        q = (
            select(WorkloadRow.id, WorkloadRow.version, *_INFO_COLUMNS)
            .where(WorkloadRow.state == str(WorkloadState.PENDING))
            .order_by(WorkloadRow.submitted_at, WorkloadRow.id)
        )
        return [(r[0], r[1], tuple(r[2:])) for r in plain_execute(self.s)(q)]  # type: ignore[misc]

    def domain_rows(self, ids: Sequence[str]) -> dict[str, tuple[int, tuple[Any, ...]]]:
        """Workload id -> (its version, the values of its `DOMAIN_COLUMNS`), for those of `ids`
        that exist. Read past the ORM, after a flush (`plain_execute`)."""
        run = plain_execute(self.s)
        out: dict[str, tuple[int, tuple[Any, ...]]] = {}
        for part in in_chunks(ids):
            q = select(WorkloadRow.version, *DOMAIN_COLUMNS).where(WorkloadRow.id.in_(part))
            out.update((r[1], (r[0], tuple(r[1:]))) for r in run(q))
        return out

    def owed_waits(self) -> list[tuple[str, str, Wait]]:
        """(id, tenant, wait) of the pending workloads whose stored wait is `owed` (their
        tenant is owed GPUs that a reclaim will take at `wait.until`), in queue order: what
        `gpupool.scheduler.waits.planned_preemptions` reads to tell the victims."""
        q = (
            select(WorkloadRow.id, WorkloadRow.tenant, WorkloadRow.pending_wait)
            .where(
                WorkloadRow.state == str(WorkloadState.PENDING),
                starts_with(WorkloadRow.pending_wait, OWED_WAIT_PREFIX),
            )
            .order_by(WorkloadRow.queue_position, WorkloadRow.submitted_at, WorkloadRow.id)
        )
        out = []
        for wid, tenant, text in self.s.execute(q):
            wait = wait_from_json(text)
            if wait is not None:
                out.append((wid, tenant, wait))
        return out

    def count_pending_of(self, owner: str) -> int:
        """How many workloads of `owner` are pending (the per-user cap at submit)."""
        q = select(func.count()).where(
            WorkloadRow.owner == owner, WorkloadRow.state == str(WorkloadState.PENDING)
        )
        return int(self.s.scalar(q) or 0)

    def count_by_state_tenant(self) -> list[tuple[str, str, int]]:
        q = select(WorkloadRow.state, WorkloadRow.tenant, func.count()).group_by(
            WorkloadRow.state, WorkloadRow.tenant
        )
        return [(s, t, int(n)) for s, t, n in self.s.execute(q)]

    def change_state(
        self,
        workload_id: str,
        to: WorkloadState,
        now: float,
        reason: str,
        *,
        exit_code: int | None = None,
        expect: Collection[WorkloadState] | None = None,
        data: dict[str, object] | None = None,
    ) -> Workload:
        """Move a workload to `to` (see the module docstring). `expect` guards against races:
        if the stored state is not one of them, Conflict is raised and nothing changes.
        (`AdmissionRepo.admit` writes `pending -> admitted` for a batch through the same
        `transition` and the same columns, `convert.LIFECYCLE_FIELDS` and `NOTE_KEYS`;
        tests/store/test_admissions.py holds its rows and events equal to this path's.)"""
        row = self._row(workload_id, lock=True)
        current = workload_to_domain(row)
        if expect is not None and current.state not in expect:
            raise Conflict(
                f"workload {workload_id} is {current.state}, not "
                + " or ".join(sorted(str(s) for s in expect))
            )
        new, event = transition(current, to, now, reason, exit_code=exit_code)
        workload_to_row(new, row)
        if to is not WorkloadState.PENDING:  # its why-pending notes (NOTE_KEYS) are gone
            for k in NOTE_KEYS:
                setattr(row, k, None)
        if current.state in ACTIVE_STATES and to not in ACTIVE_STATES:
            AllocationRepo(self.s).release(workload_id, now, to)
            row.stop_state = row.stop_reason = row.stop_requested_at = None
            row.endpoint = None
        if new.terminal:  # a declared environment may hold secrets: gone with the work
            self.s.execute(delete(WorkloadEnvRow).where(WorkloadEnvRow.workload_id == workload_id))
            self.s.execute(delete(WorkloadPodRow).where(WorkloadPodRow.workload_id == workload_id))
        if data:
            event = Event(
                at=event.at,
                kind=event.kind,
                message=event.message,
                workload_id=event.workload_id,
                tenant=event.tenant,
                user=event.user,
                data={**event.data, **data},
            )
        self.s.add(event_to_row(event))
        self.s.flush()
        return new

    def set_pending_info(
        self,
        infos: Mapping[str, PendingInfo],
        stored: Mapping[str, StoredInfo] | None = None,
    ) -> int:
        """Store the latest why-pending of each listed workload that is still pending; only
        rows whose stored reason, positions or wait differ are written. `stored`: what the
        caller read of them (`pending_rows`, maybe in an earlier transaction): rows are then
        compared with it, not read again, and one it lacks is written. Either way the UPDATE
        only touches rows still pending. Returns how many rows it asked to write."""
        if not infos:
            return 0
        read_here = stored is None  # then only the rows found pending are written
        if stored is None:
            stored = self._stored_infos(list(infos))
        params = []
        for wid, info in infos.items():
            if read_here and wid not in stored:
                continue
            row = info_columns(info)
            if stored.get(wid) != row:
                reason, position, tenant_position, wait = row
                params.append(
                    {
                        "b_id": wid,
                        "b_r": reason,
                        "b_p": position,
                        "b_t": tenant_position,
                        "b_w": wait,
                    }
                )
        if params:
            # rows locked in id order, as every multi-row write of workloads does (admissions
            # in batches): two writers taking them in different orders could deadlock
            params.sort(key=_by_b_id)
            plain_executemany(self.s, _SET_INFO, params)  # (plain text and numbers)
        return len(params)

    def _stored_infos(self, ids: Sequence[str]) -> dict[str, StoredInfo]:
        """The stored why-pending of those of `ids` that are pending."""
        out: dict[str, StoredInfo] = {}
        for part in in_chunks(ids):
            q = select(WorkloadRow.id, *_INFO_COLUMNS).where(
                WorkloadRow.id.in_(part),
                WorkloadRow.state == str(WorkloadState.PENDING),
            )
            out.update((r[0], tuple(r[1:])) for r in self.s.execute(q))  # type: ignore[misc]
        return out

    def set_forecasts(self, forecasts: Mapping[str, Forecast]) -> int:
        """Store the forecast of each listed (still pending) workload; only rows whose stored
        forecast differs other than in `made_at` are written (their `made_at`: when it last
        changed). Returns how many were written."""
        if not forecasts:
            return 0
        ids = list(forecasts)
        stored: dict[str, Forecast | None] = {}
        for part in in_chunks(ids):
            q = select(WorkloadRow.id, WorkloadRow.pending_forecast).where(
                WorkloadRow.id.in_(part),
                WorkloadRow.state == str(WorkloadState.PENDING),
            )
            stored.update((wid, forecast_from_json(text)) for wid, text in self.s.execute(q))
        params = []
        for wid, f in forecasts.items():
            if wid not in stored:
                continue
            old = stored[wid]
            if old is not None and dataclasses.replace(old, made_at=f.made_at) == f:
                continue
            params.append({"id": wid, "pending_forecast": forecast_to_json(f)})
        if params:
            self.s.execute(update(WorkloadRow), params)
        return len(params)

    def past_runs(self, limit: int = 5000) -> list[PastRun]:
        """The last `limit` finished runs (started and finished), oldest first: what start-time
        forecasts learn run times from (gpupool.sim.runtimes)."""
        q = (
            select(*DOMAIN_COLUMNS)
            .where(
                WorkloadRow.finished_at.is_not(None),
                WorkloadRow.started_at.is_not(None),
                WorkloadRow.state.in_([str(s) for s in _RAN_STATES]),
            )
            .order_by(WorkloadRow.finished_at.desc())
            .limit(limit)
        )
        out = []
        for r in self.s.execute(q):
            w = workload_to_domain(domain_workload(r))
            ran = (w.finished_at or 0.0) - (w.started_at or 0.0)
            if ran > 0:
                out.append(PastRun(w.owner, w.tenant, w.kind, w.request.total_gpu_milli, ran))
        out.reverse()
        return out

    def request_stop(
        self, workload_id: str, to: WorkloadState, reason: str, now: float
    ) -> WorkloadRecord:
        """Note that the active workload is being stopped and will become `to` once its work
        has ended; it keeps its allocation until then. A second request keeps the first."""
        row = self._row(workload_id, lock=True)
        if WorkloadState(row.state) not in ACTIVE_STATES:
            raise Conflict(f"workload {workload_id} is {row.state}, not running; nothing to stop")
        if row.stop_state is None:
            row.stop_state = str(to)
            row.stop_reason = reason
            row.stop_requested_at = now
            self.s.add(
                event_to_row(
                    Event(
                        at=now,
                        kind="workload.stopping",
                        message=reason,
                        workload_id=workload_id,
                        tenant=row.tenant,
                        user=row.owner,
                        data={"to": str(to)},
                    )
                )
            )
            self.s.flush()
        return _record(row)

    def set_executor_ref(self, workload_id: str, ref: str | None) -> None:
        self._row(workload_id).executor_ref = ref

    def set_endpoint(self, workload_id: str, endpoint: str | None) -> None:
        """Record where the workload's server listens (None: nowhere known)."""
        self._row(workload_id).endpoint = endpoint

    def set_env(self, workload_id: str, env: Mapping[str, str]) -> None:
        """Keep the environment `workload_id` declared (nothing kept for an empty one)."""
        if env:
            self.s.merge(WorkloadEnvRow(workload_id=workload_id, env=dict(env)))

    def env_of(self, workload_id: str) -> dict[str, str]:
        """The environment `workload_id` declared ({} if none, or once it has ended)."""
        return self.envs_of([workload_id])[workload_id]

    def envs_of(self, workload_ids: Collection[str]) -> dict[str, dict[str, str]]:
        """`env_of` of each of `workload_ids` (one query per `in_chunks`; none: {})."""
        ids = list(workload_ids)
        out: dict[str, dict[str, str]] = {wid: {} for wid in ids}
        for part in in_chunks(ids):
            q = select(WorkloadEnvRow.workload_id, WorkloadEnvRow.env).where(
                WorkloadEnvRow.workload_id.in_(part)
            )
            for wid, env in self.s.execute(q):
                out[wid] = {str(k): str(v) for k, v in (env or {}).items()}
        return out

    def set_pod_spec(self, workload_id: str, spec: Mapping[str, Any] | None) -> None:
        """Keep the pod template of a notebook on Kubernetes (nothing kept for None)."""
        if spec:
            self.s.merge(WorkloadPodRow(workload_id=workload_id, spec=dict(spec)))

    def pod_spec_of(self, workload_id: str) -> dict[str, Any] | None:
        """The pod template `workload_id` was submitted with (None: none, or it ended)."""
        row = self.s.get(WorkloadPodRow, workload_id)
        return dict(row.spec) if row is not None else None

    def set_start_retry(self, workload_id: str, attempts: int, retry_at: float | None) -> None:
        """Record a failed start: `attempts` in a row, and when to try again (None: not)."""
        row = self._row(workload_id)
        row.start_attempts = attempts
        row.retry_at = retry_at
        self.s.flush()
