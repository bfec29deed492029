"""Step 3c-3e of a scheduling cycle (gpupool.scheduler.cycle): a blocked candidate reclaims
borrowed work of other tenants, waits for work already stopping, or (service levels) has its
own tenant's checkpointing work at a higher level stopped; what it will use is promised to it
so that nothing else takes it this cycle. Functions of the cycle's inputs and state
(gpupool.scheduler.cyclestate); pure, as the cycle is."""

from __future__ import annotations

from gpupool.domain import Workload
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.cyclestate import CycleInputs, CycleState
from gpupool.scheduler.defrag import find_move
from gpupool.scheduler.levels import LevelPreemptor, pending_level
from gpupool.scheduler.limits import at_limit_text
from gpupool.scheduler.preemption import (
    Reclaim,
    Reclaimer,
    borrowing_branch,
    reclaim_due,
    within_some_guarantee,
)
from gpupool.scheduler.reasons import move_text, reclaim_text
from gpupool.scheduler.types import Policy, Preemption


class Preemptors:
    """The cycle's victim finders, built on first use (indexing the running work costs), and
    the ids of the victims chosen this cycle, which they share."""

    __slots__ = ("ins", "st", "_reclaimer", "levels", "victims")

    def __init__(self, ins: CycleInputs, st: CycleState):
        self.ins = ins
        self.st = st
        self._reclaimer: Reclaimer | None = None
        self.levels: LevelPreemptor | None = None
        self.victims: set[str] = set()

    @property
    def built(self) -> bool:
        """True once the Reclaimer exists."""
        return self._reclaimer is not None

    def reclaimer(self) -> Reclaimer:
        if self._reclaimer is None:
            ins = self.ins
            self._reclaimer = Reclaimer(
                self.st.cap,
                ins.tree,
                self.st.effective,
                ins.snap.running,
                ins.now,
                ins.config.min_runtime_s,
                ins.snap.attained_service if ins.config.reclaim_checkpointing_by_service else None,
            )
            self._reclaimer.taken = self.victims
        return self._reclaimer


def reclaim(ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, shape: Shape) -> bool:
    """Preempt borrowed work for `w` (or wait for work already stopping). True if so."""
    if (
        not pre.built
        and not ins.cache.stopping()
        and not borrowing_branch(ins.tree, st.effective, w.tenant)
        and not _may_move(ins)
    ):
        return False  # no victim and nothing stopping: the same answer, without the index
    rc = pre.reclaimer()
    config = ins.config
    milli = shape.gpu_milli
    found = rc.waits_for_stopping(shape)
    if found is None:
        if reclaim_due(w, ins.now, config.reclaim_after_s):
            found = rc.find(w.tenant, shape, set(st.holds))
            if found is None:
                return _move(ins, st, w, shape, rc)
        else:
            # before reclaim_after_s: checkpointing work only (it loses no progress),
            # reclaimed or, where the free GPUs are scattered, moved
            if config.reclaim_checkpointing_at_once and milli and ins.cache.checkpointing():
                with rc.only_checkpointing():
                    found = rc.find(w.tenant, shape, set(st.holds))
                    if found is None and _move(ins, st, w, shape, rc):
                        return True
            if found is None:
                # say what will happen when it is due (unless capacity frees up before)
                at = w.submitted_at + config.reclaim_after_s
                later = rc.preview(w.tenant, shape, set(st.holds), at) if milli else None
                if later is not None:
                    st.waits.owed(w, milli, later.victims, at)
                return False
        rc.commit(found)
        for v in found.victims:
            reason = rc.reason(v, w.tenant, w.id)
            st.preemptions.append(Preemption(v.workload.id, w.id, reason))
    st.promise(w, shape, found)
    st.reasons[w.id] = why = reclaim_text(len(found.victims), found.stopping)
    st.waits.reclaiming(w, why, found.victims)
    return True


def _may_move(ins: CycleInputs) -> bool:
    return ins.config.defrag_moves and ins.cache.checkpointing() > 0


def _move(ins: CycleInputs, st: CycleState, w: Workload, shape: Shape, rc: Reclaimer) -> bool:
    """Reclaim found no node for `w` (owed GPUs, due): make one node whole by moving
    smaller checkpointing work to free places elsewhere (gpupool.scheduler.defrag)."""
    if not _may_move(ins):
        return False
    move = find_move(rc, w.tenant, shape, set(st.holds))
    if move is None:
        return False
    moved = {id(rw): p for rw, p in move.moved}
    names = st.cap.nodes
    for v in move.reclaim.victims:
        p = moved.get(id(v))
        if p is None:
            rc.take((v,))
            st.preemptions.append(Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id)))
            continue
        rc.taken.add(v.workload.id)  # moved: its GPUs stay counted (it runs elsewhere)
        to = names[p.node].name
        st.preemptions.append(
            Preemption(
                v.workload.id,
                w.id,
                f"moved to {to} to make room for {w.id} of {w.tenant}, which is owed "
                "whole GPUs on one node; it resumes from its checkpoint there",
                move_to=to,
            )
        )
    st.promise(w, shape, move.reclaim)
    n_moved = len(move.moved)
    st.reasons[w.id] = why = move_text(len(move.reclaim.victims) - n_moved, n_moved)
    st.waits.reclaiming(w, why, move.reclaim.victims)
    return True


def reclaim_pending(ins: CycleInputs, st: CycleState, w: Workload) -> bool:
    """True if `w` (within its guarantee) will reclaim borrowed work once it has waited
    `reclaim_after_s`: it is not due yet and some other branch is borrowing."""
    return not reclaim_due(w, ins.now, ins.config.reclaim_after_s) and borrowing_branch(
        ins.tree, st.effective, w.tenant
    )


def level_preempt(
    ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, shape: Shape
) -> bool:
    """Preempt the tenant's own checkpointing work at a higher service level for `w`
    (gpupool.scheduler.levels). True if so; `w` then waits for it."""
    config = ins.config
    lp = pre.levels
    if lp is None:
        if not ins.cache.checkpointing():
            return False  # no possible victim: skip indexing the running work
        lp = pre.levels = LevelPreemptor(
            st.cap,
            ins.snap.running,
            ins.snap.attained_service,
            ins.now,
            config.min_runtime_s,
            config.service_levels_s,
            config.preempt_levels_apart,
        )
        lp.taken = pre.victims
    if not lp.has_victims(w.tenant):
        return False
    level = pending_level(w, ins.snap.attained_service, config.service_levels_s)
    found = lp.find(w, level, shape, set(st.holds))
    if found is None:
        return False
    n, victims, placement = found
    why = (
        f"{len(victims)} of {w.tenant}'s own checkpointing workloads with more attained "
        "service are being stopped for it (they resume later)"
    )
    for v in victims:
        st.preemptions.append(
            Preemption(
                v.workload.id,
                w.id,
                f"{w.id} of {w.tenant} has less attained service; it resumes from its "
                "checkpoint later",
            )
        )
        st.effective.remove(v.workload.tenant, v.workload.owner, v.allocation.gpu_milli)
    st.promise(w, shape, Reclaim(n, victims, 0, placement))
    st.reasons[w.id] = why
    st.waits.reclaiming(w, why, victims)
    return True


def reclaim_under_limit(
    ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, milli: int, limiting: str
) -> bool:
    """The limit of `limiting` (`w`'s tenant or an ancestor) blocks `w`. If it is an
    ancestor and `w` is within its guarantee: preempt borrowed work of other tenants under
    that ancestor (or wait for such work already stopping) until it has room. True if `w`
    now waits for that; its reason says so."""
    config = ins.config
    if limiting == w.tenant or not (ins.policy is Policy.FAIR and config.preemption):
        return False
    if w.tenant in st.no_reclaim:
        return False
    if not within_some_guarantee(ins.tree, st.effective, w.tenant, milli):
        return False
    if not reclaim_due(w, ins.now, config.reclaim_after_s):
        return False
    limit = ins.tree.get(limiting).quota.limit_milli or 0
    rc = pre.reclaimer()
    need = st.usage.of(limiting) + milli - limit
    found = rc.find_under_limit(w.tenant, milli, limiting, need)
    if found is None:
        return False
    victims, stopping = found
    rc.take(victims)
    for v in victims:
        st.preemptions.append(Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id)))
    st.effective.add(w.tenant, w.owner, milli)
    st.changed()
    st.reasons[w.id] = why = f"{at_limit_text(limiting, limit)}; " + reclaim_text(
        len(victims), stopping
    )
    st.waits.reclaiming(w, why, victims)
    return True
