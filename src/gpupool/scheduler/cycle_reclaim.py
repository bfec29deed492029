"""Step 4 of a scheduling cycle (gpupool.scheduler.cycle): a blocked candidate reclaims
borrowed work of other tenants, waits for work already stopping, or (service levels) has its
own tenant's checkpointing work at a higher level stopped; what it will use is promised to it
so that nothing else takes it this cycle. Pure, as the cycle is."""

from __future__ import annotations

from gpupool.domain import TenantTree, Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import CapacityIndex, Shape
from gpupool.scheduler.defrag import find_move
from gpupool.scheduler.levels import LevelPreemptor, pending_level
from gpupool.scheduler.limits import Usage, at_limit_text
from gpupool.scheduler.preemption import (
    Reclaim,
    Reclaimer,
    borrowing_branch,
    reclaim_due,
    within_some_guarantee,
)
from gpupool.scheduler.reasons import move_text, reclaim_text
from gpupool.scheduler.reservations import Hold
from gpupool.scheduler.types import Policy, Preemption, SchedulerConfig, Snapshot
from gpupool.scheduler.waits import Waits


class ReclaimSteps:
    """The reclaim steps of `_Cycle`; the attributes are the cycle's (set by its __init__)."""

    snap: Snapshot
    now: float
    config: SchedulerConfig
    policy: Policy
    cache: SchedulerCache
    cap: CapacityIndex
    tree: TenantTree
    usage: Usage
    effective: Usage
    holds: dict[int, Hold]
    waits: Waits
    preemptions: list[Preemption]
    reasons: dict[str, str]
    no_reclaim: set[str]
    _reclaimer: Reclaimer | None
    _levels: LevelPreemptor | None
    _victims: set[str]

    def _changed(self) -> None:
        """Capacity or usage changed: the cycle forgets what it memoized (see _Cycle)."""
        raise NotImplementedError

    def _reclaimer_for_cycle(self) -> Reclaimer:
        if self._reclaimer is None:
            self._reclaimer = Reclaimer(
                self.cap,
                self.tree,
                self.effective,
                self.snap.running,
                self.now,
                self.config.min_runtime_s,
            )
            self._reclaimer.taken = self._victims
        return self._reclaimer

    def _reclaim(self, w: Workload, shape: Shape) -> bool:
        """Preempt borrowed work for `w` (or wait for work already stopping). True if so."""
        if (
            self._reclaimer is None
            and not self.cache.stopping()
            and not borrowing_branch(self.tree, self.effective, w.tenant)
            and not self._may_move()
        ):
            return False  # no victim and nothing stopping: the same answer, without the index
        rc = self._reclaimer_for_cycle()
        milli = shape.gpu_milli
        found = rc.waits_for_stopping(shape)
        if found is None:
            if reclaim_due(w, self.now, self.config.reclaim_after_s):
                found = rc.find(w.tenant, shape, set(self.holds))
                if found is None:
                    return self._move(w, shape, rc)
            else:
                # before reclaim_after_s: checkpointing work only (it loses no progress),
                # reclaimed or, where the free GPUs are scattered, moved
                if (
                    self.config.reclaim_checkpointing_at_once
                    and milli
                    and self.cache.checkpointing()
                ):
                    with rc.only_checkpointing():
                        found = rc.find(w.tenant, shape, set(self.holds))
                        if found is None and self._move(w, shape, rc):
                            return True
                if found is None:
                    # say what will happen when it is due (unless capacity frees up before)
                    at = w.submitted_at + self.config.reclaim_after_s
                    later = rc.preview(w.tenant, shape, set(self.holds), at) if milli else None
                    if later is not None:
                        self.waits.owed(w, milli, later.victims, at)
                    return False
            rc.commit(found)
            for v in found.victims:
                reason = rc.reason(v, w.tenant, w.id)
                self.preemptions.append(Preemption(v.workload.id, w.id, reason))
        self._promise(w, shape, found)
        self.reasons[w.id] = why = reclaim_text(len(found.victims), found.stopping)
        self.waits.reclaiming(w, why, found.victims)
        return True

    def _may_move(self) -> bool:
        return self.config.defrag_moves and self.cache.checkpointing() > 0

    def _move(self, w: Workload, shape: Shape, rc: Reclaimer) -> bool:
        """Reclaim found no node for `w` (owed GPUs, due): make one node whole by moving
        smaller checkpointing work to free places elsewhere (gpupool.scheduler.defrag)."""
        if not self._may_move():
            return False
        move = find_move(rc, w.tenant, shape, set(self.holds))
        if move is None:
            return False
        moved = {id(rw): p for rw, p in move.moved}
        names = self.cap.nodes
        for v in move.reclaim.victims:
            p = moved.get(id(v))
            if p is None:
                rc.take((v,))
                self.preemptions.append(
                    Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id))
                )
                continue
            rc.taken.add(v.workload.id)  # moved: its GPUs stay counted (it runs elsewhere)
            to = names[p.node].name
            self.preemptions.append(
                Preemption(
                    v.workload.id,
                    w.id,
                    f"moved to {to} to make room for {w.id} of {w.tenant}, which is owed "
                    "whole GPUs on one node; it resumes from its checkpoint there",
                    move_to=to,
                )
            )
        self._promise(w, shape, move.reclaim)
        n_moved = len(move.moved)
        self.reasons[w.id] = why = move_text(len(move.reclaim.victims) - n_moved, n_moved)
        self.waits.reclaiming(w, why, move.reclaim.victims)
        return True

    def _reclaim_pending(self, w: Workload) -> bool:
        """True if `w` (within its guarantee) will reclaim borrowed work once it has waited
        `reclaim_after_s`: it is not due yet and some other branch is borrowing."""
        return not reclaim_due(w, self.now, self.config.reclaim_after_s) and borrowing_branch(
            self.tree, self.effective, w.tenant
        )

    def _level_preempt(self, w: Workload, shape: Shape) -> bool:
        """Preempt the tenant's own checkpointing work at a higher service level for `w`
        (gpupool.scheduler.levels). True if so; `w` then waits for it."""
        lp = self._levels
        if lp is None:
            if not self.cache.checkpointing():
                return False  # no possible victim: skip indexing the running work
            lp = self._levels = LevelPreemptor(
                self.cap,
                self.snap.running,
                self.snap.attained_service,
                self.now,
                self.config.min_runtime_s,
                self.config.service_levels_s,
                self.config.preempt_levels_apart,
            )
            lp.taken = self._victims
        if not lp.has_victims(w.tenant):
            return False
        level = pending_level(w, self.snap.attained_service, self.config.service_levels_s)
        found = lp.find(w, level, shape, set(self.holds))
        if found is None:
            return False
        n, victims, placement = found
        why = (
            f"{len(victims)} of {w.tenant}'s own checkpointing workloads with more attained "
            "service are being stopped for it (they resume later)"
        )
        for v in victims:
            self.preemptions.append(
                Preemption(
                    v.workload.id,
                    w.id,
                    f"{w.id} of {w.tenant} has less attained service; it resumes from its "
                    "checkpoint later",
                )
            )
            self.effective.remove(v.workload.tenant, v.workload.owner, v.allocation.gpu_milli)
        self._promise(w, shape, Reclaim(n, victims, 0, placement))
        self.reasons[w.id] = why
        self.waits.reclaiming(w, why, victims)
        return True

    def _reclaim_under_limit(self, w: Workload, milli: int, limiting: str) -> bool:
        """The limit of `limiting` (`w`'s tenant or an ancestor) blocks `w`. If it is an
        ancestor and `w` is within its guarantee: preempt borrowed work of other tenants under
        that ancestor (or wait for such work already stopping) until it has room. True if `w`
        now waits for that; its reason says so."""
        if limiting == w.tenant or not (self.policy is Policy.FAIR and self.config.preemption):
            return False
        if w.tenant in self.no_reclaim:
            return False
        if not within_some_guarantee(self.tree, self.effective, w.tenant, milli):
            return False
        if not reclaim_due(w, self.now, self.config.reclaim_after_s):
            return False
        limit = self.tree.get(limiting).quota.limit_milli or 0
        rc = self._reclaimer_for_cycle()
        need = self.usage.of(limiting) + milli - limit
        found = rc.find_under_limit(w.tenant, milli, limiting, need)
        if found is None:
            return False
        victims, stopping = found
        rc.take(victims)
        for v in victims:
            self.preemptions.append(Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id)))
        self.effective.add(w.tenant, w.owner, milli)
        self._changed()
        self.reasons[w.id] = why = (
            f"{at_limit_text(limiting, limit)}; " + reclaim_text(len(victims), stopping)
        )
        self.waits.reclaiming(w, why, victims)
        return True

    def _promise(self, w: Workload, shape: Shape, found: Reclaim) -> None:
        """Keep for `w` what it will use (the part that is free now is assumed, so no one
        else takes it this cycle) and count its GPUs against its guarantee from now on."""
        cap = self.cap
        n = found.placement.node
        takes = []
        for g, milli, mem in found.placement.takes:
            takes.append(
                (g, min(milli, max(0, cap.free_milli[g])), min(mem, max(0, cap.free_gmem[g])))
            )
        cpu = min(shape.cpu_milli, max(0, cap.free_cpu[n]))
        mem = min(shape.memory_mib, max(0, cap.free_mem[n]))
        cap.assume(n, takes, cpu, mem)
        self.effective.add(w.tenant, w.owner, shape.gpu_milli)
        self._changed()
