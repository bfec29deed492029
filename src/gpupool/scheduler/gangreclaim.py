"""Reclaim for multi-node requests (gangs): a gang within its tenant's guarantee that does
not fit takes borrowed work back on N nodes at once, or not at all.

Each of the gang's N nodes must have room for one member (`per_node(shape)`): nodes where it
fits now (free, or kept for this gang), then nodes where work already stopping makes room,
then nodes where victims chosen by the single-node rules of `Reclaimer.find` make room (the
victims of one node are taken before the next node is searched, so a borrower is never taken
below its guarantee across nodes). If fewer than N nodes can be found, nothing is preempted.
The N nodes are kept for the gang for the rest of the cycle; the caller nominates them for
the next cycles (`Snapshot.nominated`). Pure; called by gpupool.scheduler.gangwalk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupool.domain import Workload
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.gangs import per_node
from gpupool.scheduler.placement import place_on_node
from gpupool.scheduler.preemption import borrowing_branch, reclaim_due
from gpupool.scheduler.reasons import reclaim_text
from gpupool.scheduler.reservations import Hold
from gpupool.scheduler.types import Preemption, RunningWorkload

if TYPE_CHECKING:
    from gpupool.scheduler.cycle import _Cycle


def reclaim_for_gang(c: _Cycle, w: Workload, shape: Shape) -> bool:
    """Preempt borrowed work on N nodes for gang `w` (within its tenant's guarantee, due
    after `reclaim_after_s`), or wait for work already stopping there. True if so: the nodes
    are held for it and its reason says what it waits for. False changes nothing."""
    if not reclaim_due(w, c.now, c.config.reclaim_after_s):
        return False
    if not c.cache.stopping() and not borrowing_branch(c.tree, c.effective, w.tenant):
        return False
    cap, one = c.cap, per_node(shape)
    mine = {n for n, h in c.holds.items() if h.workload_id == w.id}
    chosen: list[int] = [
        n
        for n in range(len(cap.nodes))
        if cap.node_ready[n]
        and (n in mine or n not in c.holds)
        and place_on_node(cap, n, one) is not None
    ][: shape.nodes]
    rc = c._reclaimer_for_cycle()
    stopping = 0
    while len(chosen) < shape.nodes:
        r = rc.waits_for_stopping(one)
        if r is None:
            break
        if r.node not in chosen and (r.node in mine or r.node not in c.holds):
            chosen.append(r.node)
            stopping += r.stopping
    victims: list[RunningWorkload] = []
    while len(chosen) < shape.nodes:
        found = rc.find(w.tenant, one, set(c.holds) - mine | set(chosen))
        if found is None:
            rc.give_back(victims)
            return False
        rc.take(found.victims)
        victims.extend(found.victims)
        chosen.append(found.node)
    for v in victims:
        c.preemptions.append(Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id)))
    for n in chosen:
        if n not in c.holds:
            c._hold(n, Hold(w.tenant, w.id, one))
    c.effective.add(w.tenant, w.owner, shape.gpu_milli)
    c._changed()
    c.reasons[w.id] = why = (
        reclaim_text(len(victims), stopping) + f" on {shape.nodes} nodes held for it"
    )
    c.waits.reclaiming(w, why, victims)
    return True
