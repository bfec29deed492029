"""The cycle's steps for multi-node requests (gangs): admit all N at once, or block and hold
N nodes; and backfill onto held gang nodes by work that ends before the gang is due.

Functions of the cycle's inputs and state (gpupool.scheduler.cyclestate), called by
gpupool.scheduler.cycle; pure like it (see gpupool.scheduler.gangs for the placement rules).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain import Workload
from gpupool.scheduler.capacity import CPU_ONLY, Shape
from gpupool.scheduler.cycle_reclaim import Preemptors
from gpupool.scheduler.cyclestate import CycleInputs, CycleState, GangHold
from gpupool.scheduler.gangreclaim import (
    clear_for_gang,
    give_back_held,
    hold_backfill,
    reclaim_for_gang,
)
from gpupool.scheduler.gangs import (
    find_gang,
    gang_allocation,
    gang_due,
    gang_reservation,
    per_node,
)
from gpupool.scheduler.placement import Placement, place_on_node
from gpupool.scheduler.preemption import reclaim_due, within_some_guarantee
from gpupool.scheduler.queues import Candidate
from gpupool.scheduler.reservations import Hold, expected_start

__all__ = ["GangHold", "GangTurn", "backfill_gang_nodes", "may_hold", "place_gang"]


def place_gang(
    ins: CycleInputs, st: CycleState, pre: Preemptors, turn: GangTurn, w: Workload, shape: Shape
) -> bool:
    """Admit gang `w` on N nodes at once (True), or give its reason and, while fewer than
    `gang_reservations` gangs hold nodes this cycle, hold the N nodes where it is closest to
    fitting (False)."""
    config, cap, tree = ins.config, st.cap, ins.tree
    gp = None
    mine = [n for n, h in st.holds.items() if h.workload_id == w.id]  # nominated to it
    if mine or shape not in st.memo.nofit:
        allowed = set(mine)
        gp = find_gang(cap, shape, config.topology_keys, allowed.__contains__)
        if gp is None and not mine:
            st.memo.nofit.add(shape)
    if gp is not None:
        alloc = gang_allocation(cap, w.id, gp, shape, ins.now, config.shared_enforcement)
        for p in gp.members:
            cap.assume(p.node, list(p.takes), shape.cpu_milli, shape.memory_mib)
        st.admitted(w, shape.gpu_milli, alloc)
        return True
    within = ins.quotas and within_some_guarantee(tree, st.effective, w.tenant, shape.gpu_milli)
    if within and config.preemption and ins.policy.value == "fair":
        # like one-node work: reclaim in queue order (gpupool.scheduler.gangreclaim)
        if w.tenant not in st.no_reclaim and reclaim_for_gang(ins, st, pre, w, shape):
            return False
        # the nodes it clears are held for it: no blocked work ahead takes them
        if clear_for_gang(ins, st, pre, w, shape):
            return False
        if reclaim_due(w, ins.now, config.reclaim_after_s):
            st.no_reclaim.add(w.tenant)
    st.reasons[w.id] = why = st.blocked_reason(shape)
    if len(st.gang_holds) < config.gang_reservations and may_hold(ins, turn, w):
        nodes = gang_reservation(cap, shape, config.topology_keys)
        if nodes is not None:
            one = per_node(shape)
            for n in nodes:
                st.hold(n, Hold(w.tenant, w.id, one))
            due = gang_due([expected_start(cap, n, one, ins.running_on(cap, n)) for n in nodes])
            borrowing = ins.quotas and not within_some_guarantee(
                tree, st.effective, w.tenant, shape.gpu_milli
            )
            st.gang_holds.append(GangHold(w.id, tuple(nodes), due, borrowing))
            if give_back_held(ins, st, pre, w, shape, nodes):  # borrowed checkpointing leaves
                return False
            names = ", ".join(cap.nodes[n].name for n in nodes[:4])
            more = f" and {len(nodes) - 4} more" if len(nodes) > 4 else ""
            st.reasons[w.id] = f"{why}; nodes {names}{more} are held for it"
            st.waits.reserved(w, nodes[0], due)
    if ins.policy.value == "fair" and not config.backfill:
        st.stopped[w.tenant] = w.id
    return False


class GangTurn:
    """(fair) The ids of the `count` waiting gangs submitted first, in any tenant's queue;
    found on first use."""

    __slots__ = ("_queues", "_count", "_ids")

    def __init__(self, queues: Mapping[str, list[Candidate]], count: int):
        self._queues = queues
        self._count = count
        self._ids: frozenset[str] | None = None

    def __contains__(self, workload_id: object) -> bool:
        if self._ids is None:
            gangs = sorted(
                (e[1].submitted_at, e[1].id)
                for q in self._queues.values()
                for e in q
                if e[2].nodes > 1
            )
            self._ids = frozenset(wid for _, wid in gangs[: self._count])
        return workload_id in self._ids


def may_hold(ins: CycleInputs, turn: GangTurn, w: Workload) -> bool:
    """Whether blocked gang `w` may hold nodes: under `fair`, only the `gang_reservations`
    waiting gangs submitted first (in whatever tenant: `turn`), as under `fifo`. The queue
    order between tenants changes from cycle to cycle; a hold that went to whichever gang came
    first would move between gangs and nodes, and no node would drain for any of them
    (issue 32)."""
    if ins.policy.value != "fair":
        return True
    return w.id in turn


def backfill_gang_nodes(
    ins: CycleInputs, st: CycleState, w: Workload, shape: Shape
) -> Placement | None:
    """A placement for one-node GPU work `w` on nodes held for a gang, if `w`'s max runtime
    ends before the gang is due there (so the gang starts no later for it), or (fair) if the
    gang borrows and `w` is within a guarantee, or (fair, `gang_hold_backfill`) if `w` declares
    checkpointing and would borrow (it gives the node back: gangreclaim.give_back_held);
    else None."""
    if shape.kind == CPU_ONLY or shape.nodes > 1:
        return None
    ends = ins.now + w.max_runtime_s if w.max_runtime_s is not None else None
    resumable = hold_backfill(ins) and w.checkpointing and w.preemptible
    guaranteed = (
        within_some_guarantee(ins.tree, st.effective, w.tenant, shape.gpu_milli)
        if resumable or (ins.quotas and any(h.borrowing for h in st.gang_holds))
        else False
    )
    gives_back = resumable and not guaranteed  # it would borrow: it may be stopped there
    for h in st.gang_holds:
        fits_before = ends is not None and h.due is not None and ends <= h.due
        if not fits_before and not (h.borrowing and guaranteed) and not gives_back:
            continue
        for n in h.nodes:
            p = place_on_node(st.cap, n, shape)
            if p is not None:
                return p
    return None
