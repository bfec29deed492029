"""The cycle's steps for multi-node requests (gangs): admit all N at once, or block and hold
N nodes; and backfill onto held gang nodes by work that ends before the gang is due.

Called by gpupool.scheduler.cycle with its per-cycle state; pure like it (see
gpupool.scheduler.gangs for the placement rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpupool.domain import Workload
from gpupool.scheduler.capacity import CPU_ONLY, Shape
from gpupool.scheduler.gangreclaim import give_back_held, hold_backfill, reclaim_for_gang
from gpupool.scheduler.gangs import (
    find_gang,
    gang_allocation,
    gang_due,
    gang_reservation,
    per_node,
)
from gpupool.scheduler.placement import Placement, place_on_node
from gpupool.scheduler.preemption import reclaim_due, within_some_guarantee
from gpupool.scheduler.reservations import Hold, expected_start
from gpupool.scheduler.types import Admission

if TYPE_CHECKING:
    from gpupool.scheduler.cycle import _Cycle


@dataclass(frozen=True, slots=True)
class GangHold:
    """Nodes held this cycle for a blocked gang, and when it can start there (None: some
    work in the way has no max runtime)."""

    workload_id: str
    nodes: tuple[int, ...]
    due: float | None
    #: (fair) the gang would borrow beyond its tenant's guarantee: work within a guarantee
    #: may still use the held nodes (a borrower's hold never keeps guaranteed work waiting)
    borrowing: bool = False


def place_gang(c: _Cycle, w: Workload, shape: Shape) -> bool:
    """Admit gang `w` on N nodes at once (True), or give its reason and, while fewer than
    `gang_reservations` gangs hold nodes this cycle, hold the N nodes where it is closest to
    fitting (False)."""
    gp = None
    mine = [n for n, h in c.holds.items() if h.workload_id == w.id]  # nominated to it
    if mine or shape not in c.nofit:
        allowed = set(mine)
        gp = find_gang(c.cap, shape, c.config.topology_keys, allowed.__contains__)
        if gp is None and not mine:
            c.nofit.add(shape)
    if gp is not None:
        alloc = gang_allocation(c.cap, w.id, gp, shape, c.now, c.config.shared_enforcement)
        for p in gp.members:
            c.cap.assume(p.node, list(p.takes), shape.cpu_milli, shape.memory_mib)
        c.usage.add(w.tenant, w.owner, shape.gpu_milli)
        c.effective.add(w.tenant, w.owner, shape.gpu_milli)
        c.admissions.append(Admission(w.id, alloc))
        return True
    within = c.quotas and within_some_guarantee(c.tree, c.effective, w.tenant, shape.gpu_milli)
    if within and c.config.preemption and c.policy.value == "fair":
        # like one-node work: reclaim in queue order (gpupool.scheduler.gangreclaim)
        if w.tenant not in c.no_reclaim and reclaim_for_gang(c, w, shape):
            return False
        if reclaim_due(w, c.now, c.config.reclaim_after_s):
            c.no_reclaim.add(w.tenant)
    c.reasons[w.id] = why = c._blocked_reason(shape)
    if len(c.gang_holds) < c.config.gang_reservations and may_hold(c, w):
        nodes = gang_reservation(c.cap, shape, c.config.topology_keys)
        if nodes is not None:
            one = per_node(shape)
            for n in nodes:
                c._hold(n, Hold(w.tenant, w.id, one))
            due = gang_due([expected_start(c.cap, n, one, c._running_on(n)) for n in nodes])
            borrowing = c.quotas and not within_some_guarantee(
                c.tree, c.effective, w.tenant, shape.gpu_milli
            )
            c.gang_holds.append(GangHold(w.id, tuple(nodes), due, borrowing))
            if give_back_held(c, w, shape, nodes):  # borrowed checkpointing work leaves
                return False
            names = ", ".join(c.cap.nodes[n].name for n in nodes[:4])
            more = f" and {len(nodes) - 4} more" if len(nodes) > 4 else ""
            c.reasons[w.id] = f"{why}; nodes {names}{more} are held for it"
            c.waits.reserved(w, nodes[0], due)
    if c.policy.value == "fair" and not c.config.backfill:
        c.stopped_tenants[w.tenant] = w.id
    return False


def may_hold(c: _Cycle, w: Workload) -> bool:
    """Whether blocked gang `w` may hold nodes: under `fair`, only the `gang_reservations`
    waiting gangs submitted first (in whatever tenant), as under `fifo`. The queue order
    between tenants changes from cycle to cycle; a hold that went to whichever gang came
    first would move between gangs and nodes, and no node would drain for any of them
    (issue 32)."""
    if c.policy.value != "fair":
        return True
    if c.gang_turn is None:
        gangs = sorted(
            (e[1].submitted_at, e[1].id) for q in c.queues.values() for e in q if e[2].nodes > 1
        )
        c.gang_turn = frozenset(wid for _, wid in gangs[: c.config.gang_reservations])
    return w.id in c.gang_turn


def backfill_gang_nodes(c: _Cycle, w: Workload, shape: Shape) -> Placement | None:
    """A placement for one-node GPU work `w` on nodes held for a gang, if `w`'s max runtime
    ends before the gang is due there (so the gang starts no later for it), or (fair) if the
    gang borrows and `w` is within a guarantee, or (fair, `gang_hold_backfill`) if `w` declares
    checkpointing and would borrow (it gives the node back: gangreclaim.give_back_held);
    else None."""
    if shape.kind == CPU_ONLY or shape.nodes > 1:
        return None
    ends = c.now + w.max_runtime_s if w.max_runtime_s is not None else None
    resumable = hold_backfill(c) and w.checkpointing and w.preemptible
    guaranteed = (
        within_some_guarantee(c.tree, c.effective, w.tenant, shape.gpu_milli)
        if resumable or (c.quotas and any(h.borrowing for h in c.gang_holds))
        else False
    )
    gives_back = resumable and not guaranteed  # it would borrow: it may be stopped there
    for h in c.gang_holds:
        fits_before = ends is not None and h.due is not None and ends <= h.due
        if not fits_before and not (h.borrowing and guaranteed) and not gives_back:
            continue
        for n in h.nodes:
            p = place_on_node(c.cap, n, shape)
            if p is not None:
                return p
    return None
