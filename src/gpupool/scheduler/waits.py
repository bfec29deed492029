"""Waits that end at a known time or event, collected during a cycle and given to the pending
workloads at its end (`Waits.apply`), as a `Wait` and a longer reason.

* OWED: blocked work within its tenant's guarantee whose reclaim is not due yet: its tenant is
  owed the GPUs; unless capacity frees up first they will be taken from the workloads a reclaim
  would choose now, at `submitted_at + reclaim_after_s`;
* RESERVED: blocked work holding a reservation on a node; where the running work there has a
  max runtime, the time by which it can start at the latest (`expected_start`);
* RECLAIMING: work was preempted (or is stopping) for it.

These are per workload, so the cycle never memoizes them as the reason of a shape or tenant.
`planned_preemptions` turns the OWED waits around: for each running workload they name, when
it will be preempted and for whom (what the victim is told; no decision depends on it).
Pure: no I/O; times are on the scheduler's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

from gpupool.domain import Workload
from gpupool.scheduler.capacity import CapacityIndex
from gpupool.scheduler.reasons import expected_start_text, owed_text, preemption_plan_text
from gpupool.scheduler.types import (
    PendingInfo,
    RunningWorkload,
    Wait,
    WaitKind,
)


@dataclass(frozen=True, slots=True)
class PlannedPreemption:
    """Running work an OWED wait names: unless GPUs free up first, it is preempted at `at`
    so that `for_workload` of `for_tenant` gets its guaranteed share."""

    at: float
    for_tenant: str
    for_workload: str

    @property
    def reason(self) -> str:
        return preemption_plan_text(self.at, self.for_tenant)


def planned_preemptions(owed: Iterable[tuple[str, str, Wait]]) -> dict[str, PlannedPreemption]:
    """Victim workload id -> its planned preemption, from the waits of pending work given as
    (workload id, tenant, wait) in queue order: the earliest `until` naming it (on a tie, the
    first in the queue). Waits other than OWED, or without a time, plan nothing."""
    out: dict[str, PlannedPreemption] = {}
    for wid, tenant, wait in owed:
        if wait.kind is not WaitKind.OWED or wait.until is None:
            continue
        plan = PlannedPreemption(wait.until, tenant, wid)
        for victim in wait.victims:
            known = out.get(victim)
            if known is None or plan.at < known.at:
                out[victim] = plan
    return out


class _Entry:
    __slots__ = ("wait", "text", "reason")

    def __init__(self, wait: Wait, text: str = "", reason: str | None = None):
        self.wait = wait
        #: what is added to the plain reason
        self.text = text
        #: the whole reason, when it replaces the plain one
        self.reason = reason


class Waits:
    """Structured waits of one cycle, by workload id."""

    def __init__(self, cap: CapacityIndex):
        self.cap = cap
        self._by_id: dict[str, _Entry] = {}

    def owed(
        self, w: Workload, milli: int, victims: Sequence[RunningWorkload], until: float
    ) -> None:
        """`w`'s tenant is owed `milli`; a reclaim at `until` would take `victims`."""
        names = tuple(v.workload.id for v in victims)
        tenants = sorted({v.workload.tenant for v in victims})
        wait = Wait(WaitKind.OWED, owed_milli=milli, victims=names, until=until)
        self._by_id[w.id] = _Entry(wait, owed_text(w.tenant, milli, names, tenants, until))

    def reserved(self, w: Workload, n: int, at: float | None) -> None:
        """`w` holds a reservation on node `n`; it can start by `at` (None: unknown)."""
        node = self.cap.nodes[n].name
        e = self._by_id.get(w.id)
        extra = expected_start_text(node, at) if at is not None else ""
        if e is None:
            self._by_id[w.id] = _Entry(Wait(WaitKind.RESERVED, node=node, expected_start=at), extra)
            return
        old = e.wait
        e.wait = Wait(
            old.kind, old.owed_milli, old.victims, old.until, node=node, expected_start=at
        )
        e.text += extra

    def reclaiming(self, w: Workload, reason: str, victims: Sequence[RunningWorkload]) -> None:
        """Work was preempted (`victims`, or work already stopping) for `w`."""
        names = tuple(v.workload.id for v in victims)
        self._by_id[w.id] = _Entry(Wait(WaitKind.RECLAIMING, victims=names), reason=reason)

    def apply(self, info: MutableMapping[str, PendingInfo]) -> None:
        """Give each collected wait to its workload's PendingInfo (in place)."""
        for wid, e in self._by_id.items():
            pi = info.get(wid)
            if pi is None:
                continue
            reason = e.reason if e.reason is not None else pi.reason + e.text
            info[wid] = PendingInfo(reason, pi.position, pi.tenant_position, e.wait)
