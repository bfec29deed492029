"""Moves: make one node whole for work that is owed GPUs, when the free GPUs are scattered.

A candidate within its tenant's guarantee that has waited `reclaim_after_s` (or has not,
with `reclaim_checkpointing_at_once`: then only checkpointing work is reclaimed or moved, as
the caller's `Reclaimer.only_checkpointing` makes it), for which reclaim finds no node
(gpupool.scheduler.preemption), may still fit on a node once smaller checkpointing work
there is moved to capacity that is free on other nodes. This happens when the pool has GPUs
free in ones and twos on many nodes and everyone is within their guarantee: nothing is
borrowed, so nothing can be reclaimed, and no node has the whole GPUs the candidate asks for.

Rules for work that is moved (all must hold):
* it declares `checkpointing` (a stop costs it only the work since its last checkpoint), is
  preemptible, runs on one node, has run `min_runtime_s`, and is not chosen already;
* it asks for fewer GPUs than the candidate, of any tenant (a move changes nobody's usage).
  Work as big as the candidate is left alone even where moving it would make room (its
  place elsewhere suits it but not the candidate, say for CPUs): a bound kept on purpose, so
  that a move never stops as much as the candidate gains;
* a place for it is free now on another usable (ready, not held) node; that place is kept for
  it (the Preemption names it in `move_to`, and it is nominated there).

On the node, possible victims are taken best first (as reclaim orders them): each is
reclaimed where the reclaim rules allow, else moved if it may be; those not needed are put
back, moves first. Of the nodes where the candidate fits that way, the first
`NODES_COMPARED` (most free GPUs first) are compared: fewest moved, then least progress lost.
Pure: the caller stops the victims and admits the candidate in a later cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.scheduler.capacity import WHOLE, Shape
from gpupool.scheduler.placement import Placement, find_placement, shape_of
from gpupool.scheduler.preemption import NODES_COMPARED, Reclaim, Reclaimer, Selection
from gpupool.scheduler.types import RunningWorkload


@dataclass(frozen=True, slots=True)
class Move:
    """Stop `reclaim.victims` on `reclaim.node` so the candidate fits there; of those,
    `moved` (each with where it goes) are moved, the others reclaimed."""

    reclaim: Reclaim
    moved: tuple[tuple[RunningWorkload, Placement], ...]


def movable(rc: Reclaimer, rw: RunningWorkload, milli: int) -> bool:
    """True if `rw` may be moved for a candidate asking `milli` (the rules above)."""
    w, a = rw.workload, rw.allocation
    return (
        w.checkpointing
        and not a.multi_node
        and a.gpu_milli < milli
        and w.id not in rc.taken
        and rc.eligible(rw)
    )


def find_move(rc: Reclaimer, tenant: str, shape: Shape, skip: set[int]) -> Move | None:
    """A node where `shape` of `tenant` fits once borrowed work there is reclaimed and smaller
    checkpointing work is moved to free places on other nodes, or None. Changes nothing (the
    caller commits with `commit_move`). Only whole GPUs on one node."""
    if shape.kind != WHOLE or shape.nodes > 1:
        return None
    cap, milli = rc.cap, shape.gpu_milli
    order = []
    for n, lst in rc.victims.items():
        if n in skip or not cap.node_ready[n] or not rc.could_host(n, shape):
            continue
        if not any(movable(rc, rw, milli) for rw in lst):
            continue
        free = sum(max(0, cap.free_milli[g]) for g in cap.node_gpus[n])
        order.append((-free, n))
    order.sort()
    rooms: dict[str, tuple[str, int] | None] = {}
    found: list[tuple[tuple, int, list[RunningWorkload], list[RunningWorkload], Placement]] = []
    for _, n in order:
        got = _on_node(rc, n, shape, tenant, rooms)
        if got is None:
            continue
        reclaimed, moved, fit = got
        score = (len(moved), sum(rc.lost(rw) for rw in reclaimed + moved), n)
        found.append((score, n, reclaimed, moved, fit))
        if len(found) >= NODES_COMPARED:
            break
    found.sort(key=lambda f: f[0])
    for _, n, reclaimed, moved, fit in found:
        places = _destinations(rc, n, moved)
        if places is not None:
            victims = tuple(reclaimed + moved)
            return Move(Reclaim(n, victims, 0, fit), tuple(zip(moved, places, strict=True)))
    return None


def _on_node(
    rc: Reclaimer,
    n: int,
    shape: Shape,
    tenant: str,
    rooms: dict[str, tuple[str, int] | None],
) -> tuple[list[RunningWorkload], list[RunningWorkload], Placement] | None:
    """(reclaimed, moved, placement) on node `n`: victims taken best first (reclaim where the
    rules allow, else a move) until `shape` fits, then those not needed put back."""
    milli = shape.gpu_milli
    sel = Selection(rc, tenant, milli, rooms)
    moved: list[RunningWorkload] = []
    fit = None
    for rw in rc.victims[n]:
        if not sel.offer(rw):
            if not movable(rc, rw, milli):
                continue
            moved.append(rw)
        fit = rc.fits(n, shape, sel.chosen + moved)
        if fit is not None:
            break
    if fit is None:
        return None
    chosen = sel.chosen + moved
    # put back what is not needed: moves first (each costs a stop and a place elsewhere)
    order = sorted(chosen, key=lambda r: (r not in moved, -rc.lost(r)))
    chosen = rc.put_back(n, shape, chosen, order)
    fit = rc.fits(n, shape, chosen)
    assert fit is not None
    moved_ids = {id(rw) for rw in moved}
    return (
        [rw for rw in chosen if id(rw) not in moved_ids],
        [rw for rw in chosen if id(rw) in moved_ids],
        fit,
    )


def _destinations(rc: Reclaimer, n: int, moved: list[RunningWorkload]) -> list[Placement] | None:
    """A free place for each of `moved` on nodes other than `n`, assumed taken (so no one else
    gets it this cycle); None, with nothing assumed, if one has no place."""
    cap = rc.cap
    done: list[tuple[Placement, Shape]] = []
    with cap.excluding(n):
        for rw in moved:
            s = shape_of(rw.workload.request)
            p = find_placement(cap, s)
            if p is None:
                for q, qs in reversed(done):  # give back what was assumed
                    cap.unassume(q.node, list(q.takes), qs.cpu_milli, qs.memory_mib)
                return None
            cap.assume(p.node, list(p.takes), s.cpu_milli, s.memory_mib)
            done.append((p, s))
    return [p for p, _ in done]
