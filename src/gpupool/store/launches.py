"""Launches in batches: `LaunchRepo.launch` records, in the caller's transaction, that the
executor took many admitted workloads, with a few statements for the whole batch.

One launch is what the scheduler loop wrote per workload, in a savepoint each, after the
executor's `start`: its executor reference, its move `admitted -> starting` (`change_state(...,
expect={admitted})`), and what the first poll said while the work is alive (`running`, where
it listens: `lifecycle.apply_status`). A workload no longer admitted is not moved: if it is
already `starting` or `running` (the reconciler saw it start first) only its reference is
kept; in any other state (cancelled while it was being started) nothing is written and the
caller stops what was launched. The rows and events written are those of that path, in the
same order (tests/store/test_launches.py compares them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import Table, bindparam, insert, update
from sqlalchemy.orm import Session

from gpupool.domain import WorkloadState, transition
from gpupool.store.convert import (
    LIFECYCLE_FIELDS,
    event_values,
    lifecycle_values,
    workload_to_domain,
)
from gpupool.store.errors import NotFound
from gpupool.store.rows import NOTE_KEYS, EventRow, WorkloadRow
from gpupool.store.workloads import lock_workload_rows

S = WorkloadState
_W = cast(Table, WorkloadRow.__table__)
_EV = cast(Table, EventRow.__table__)
#: a workload launched: the columns its transitions may change (bound as `b_<column>`), its
#: why-pending notes cleared (as `change_state` writes them), its executor reference and
#: where it listens
_SET_LAUNCHED = (
    update(_W)
    .where(_W.c.id == bindparam("b_id"))
    .values(
        {k: bindparam(f"b_{k}") for k in (*LIFECYCLE_FIELDS, "executor_ref", "endpoint")}
        | dict.fromkeys(NOTE_KEYS)
    )
)
#: a workload the reconciler saw start first: only its executor reference
_SET_REF = update(_W).where(_W.c.id == bindparam("b_id")).values(executor_ref=bindparam("b_ref"))
#: the states a launch finds work in when the reconciler was first: the launch still counts
ALREADY_STARTED = frozenset({S.STARTING, S.RUNNING})


@dataclass(frozen=True)
class Launch:
    """An admitted workload the executor took: its reference there, the states its launch
    moves it through, each with its reason (`starting`, then `running` if the first poll
    said so), and where it listens (None: not known yet)."""

    workload_id: str
    executor_ref: str | None
    steps: tuple[tuple[WorkloadState, str], ...]
    endpoint: str | None = None


@dataclass
class Launched:
    """What `LaunchRepo.launch` found: the workloads now starting or running (in id order)
    and those no longer admitted nor started (cancelled meanwhile: nothing written)."""

    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


class LaunchRepo:
    def __init__(self, s: Session):
        self.s = s

    def lock(self, ids: Sequence[str]) -> None:
        """Lock the rows of `ids` (PostgreSQL) in id order, as `launch` and
        `AdmissionRepo.admit` do: for a caller that writes some of them one by one too."""
        lock_workload_rows(self.s, ids)

    def launch(self, launches: Sequence[Launch], at: float) -> Launched:
        """Record `launches` at `at` (see the module), in workload id order: the rows are
        locked (PostgreSQL) in that order, as `AdmissionRepo.admit` locks them. Raises
        NotFound for a workload that does not exist (nothing written); IllegalTransition if
        a launch's steps are not allowed from `admitted`."""
        out = Launched()
        if not launches:
            return out
        by_id = {x.workload_id: x for x in launches}
        rows = lock_workload_rows(self.s, list(by_id))
        changes: list[dict[str, object]] = []
        refs: list[dict[str, object]] = []
        events: list[dict[str, object]] = []
        for wid in sorted(by_id):
            x = by_id[wid]
            row = rows.get(wid)
            if row is None:
                raise NotFound(f"no workload {wid!r}; list yours with GET /api/v1/workloads")
            state = S(row.state)
            if state is S.ADMITTED:
                w = workload_to_domain(row)
                for to, reason in x.steps:
                    w, event = transition(w, to, at, reason)
                    events.append(event_values(event))
                endpoint = x.endpoint if x.endpoint is not None else row.endpoint
                changes.append(
                    {"b_id": wid, "b_executor_ref": x.executor_ref, "b_endpoint": endpoint}
                    | {f"b_{k}": v for k, v in lifecycle_values(w).items()}
                )
            elif state in ALREADY_STARTED:
                refs.append({"b_id": wid, "b_ref": x.executor_ref})
            else:
                out.cancelled.append(wid)
                continue
            out.started.append(wid)
        run = self.s.connection().execute
        if changes:
            run(_SET_LAUNCHED, changes)
        if refs:
            run(_SET_REF, refs)
        if events:
            run(insert(_EV), events)
        return out
