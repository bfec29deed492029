"""What the steps of one scheduling cycle (gpupool.scheduler.cycle) share, in three parts:

* `CycleInputs`: read-only for the whole cycle (snapshot, clock, config, tenant tree, cache);
* `CycleState`: what the steps change (capacity, usage, holds, admissions, preemptions,
  reasons, waits, and the tenants whose blocked work stops reclaim or backfill behind it);
* `FailureMemo`: failures remembered for the rest of the cycle (usage only grows and capacity
  only shrinks within a cycle), dropped by `CycleState.changed` when a hold or a reclaim
  changes what later candidates see; `memo_run` answers a run of a queue from them.

The steps (reclaim: gpupool.scheduler.cycle_reclaim; gangs: gpupool.scheduler.gangwalk and
gangreclaim; moves: gpupool.scheduler.defrag) are functions of these. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain import Allocation, TenantTree, Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import CPU_ONLY, CapacityIndex, Shape
from gpupool.scheduler.gangs import gang_reason
from gpupool.scheduler.limits import Usage
from gpupool.scheduler.placement import place_on_node
from gpupool.scheduler.preemption import Reclaim, reclaim_due
from gpupool.scheduler.reasons import behind_host_text, behind_text, no_fit_reason
from gpupool.scheduler.reservations import Hold
from gpupool.scheduler.standing import Candidate
from gpupool.scheduler.types import (
    Admission,
    Policy,
    Preemption,
    RunningWorkload,
    SchedulerConfig,
    Snapshot,
)
from gpupool.scheduler.waits import Waits


@dataclass(slots=True)
class CycleInputs:
    """What a cycle reads and never changes. `quotas`: the policy is `fair`."""

    snap: Snapshot
    now: float
    config: SchedulerConfig
    policy: Policy
    tree: TenantTree
    cache: SchedulerCache
    quotas: bool
    _with_runtime: dict[int, list[RunningWorkload]] | None = field(default=None, repr=False)

    def running_on(self, cap: CapacityIndex, n: int) -> list[RunningWorkload]:
        """The running work on node `n` that has a max runtime (indexed once per cycle)."""
        if self._with_runtime is None:
            ids = cap.node_ids
            by_node: dict[int, list[RunningWorkload]] = {}
            for rw in self.cache.limited().values():
                for name in rw.allocation.nodes:  # a multi-node allocation: each of its nodes
                    m = ids.get(name)
                    if m is not None:
                        by_node.setdefault(m, []).append(rw)
            self._with_runtime = by_node
        return self._with_runtime.get(n, [])


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


@dataclass(slots=True)
class FailureMemo:
    """Failures valid for the rest of the cycle; `clear` drops those a hold or a reclaim may
    undo (`nofit` and the limit failures stay: capacity only shrinks, usage only grows)."""

    #: shapes no usable node fits now
    nofit: set[Shape] = field(default_factory=set)
    #: shape -> why it is blocked (gpupool.scheduler.reasons)
    blocked: dict[Shape, str] = field(default_factory=dict)
    #: tenant -> {shape: why} for placements that failed
    failed_shape: dict[str, dict[Shape, str]] = field(default_factory=dict)
    #: tenant -> shapes whose memoized failure was work within a guarantee that had not
    #: waited `reclaim_after_s`: work of that shape that has waited may still reclaim
    not_due: dict[str, set[Shape]] = field(default_factory=dict)
    #: tenant -> (smallest milli its limit refused, why)
    tenant_fail: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: tenant -> {user: (smallest milli refused, why)}
    user_fail: dict[str, dict[str, tuple[int, str]]] = field(default_factory=dict)
    #: bumped by every `clear`: a failure seen across a clear is not memoized
    epoch: int = 0

    def clear(self) -> None:
        self.epoch += 1
        for memo in self.failed_shape.values():
            memo.clear()
        self.not_due.clear()
        self.blocked.clear()


@dataclass(slots=True)
class CycleState:
    """What the steps of a cycle change. `effective` is usage without stopping work, plus
    the GPUs promised to reclaiming work; `holds` are the nodes kept for blocked work."""

    cap: CapacityIndex
    usage: Usage
    effective: Usage
    #: waits that end at a known time or event, per workload; they extend the plain reason
    #: at the end of the cycle (never memoized: they are per workload)
    waits: Waits
    memo: FailureMemo = field(default_factory=FailureMemo)
    holds: dict[int, Hold] = field(default_factory=dict)
    #: nodes held for blocked multi-node requests (gpupool.scheduler.gangwalk)
    gang_holds: list[GangHold] = field(default_factory=list)
    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    #: workload id -> why it waits (the last step that looked at it)
    reasons: dict[str, str] = field(default_factory=dict)
    #: tenants with blocked work that did not reclaim: no reclaim for work behind it
    no_reclaim: set[str] = field(default_factory=set)
    #: tenant -> its blocked head (no backfill behind it)
    stopped: dict[str, str] = field(default_factory=dict)

    def admitted(self, w: Workload, gpu_milli: int, alloc: Allocation) -> None:
        """Count an admission (its capacity is assumed by the caller)."""
        self.usage.add(w.tenant, w.owner, gpu_milli)
        self.effective.add(w.tenant, w.owner, gpu_milli)
        self.admissions.append(Admission(w.id, alloc))

    def hold(self, n: int, hold: Hold) -> None:
        """Keep node `n` for `hold` for the rest of the cycle."""
        self.holds[n] = hold
        self.changed()
        self.cap.hold(n, hold.cpu_milli, hold.memory_mib)

    def changed(self) -> None:
        """Holds or reclaims changed what later candidates see: drop the failure memos."""
        self.memo.clear()

    def promise(self, w: Workload, shape: Shape, found: Reclaim) -> None:
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
        self.changed()

    def blocked_reason(self, shape: Shape) -> str:
        """Why `shape` does not fit; memoized per shape until the next hold."""
        r = self.memo.blocked.get(shape)
        if r is None:
            r = self.memo.blocked[shape] = self._blocked_reason(shape)
        return r

    def _blocked_reason(self, shape: Shape) -> str:
        cap = self.cap
        if shape.nodes > 1:
            return gang_reason(cap, shape)
        for n in sorted(self.holds):
            if place_on_node(cap, n, shape) is not None:
                h = self.holds[n]
                if shape.kind == CPU_ONLY:  # it fits, but not beside what the holder needs
                    return behind_host_text(h.tenant, h.workload_id, cap.nodes[n].name)
                return behind_text(h.tenant, h.workload_id)
        return no_fit_reason(cap, shape)


def memo_run(
    q: list[Candidate],
    i: int,
    tfail: tuple[int, str] | None,
    ufail: dict[str, tuple[int, str]],
    failed_shape: dict[Shape, str],
    not_due: set[Shape] | None,
    now: float,
    reclaim_after_s: float,
) -> tuple[int, list[str]]:
    """From `q[i]` on, the entries that fail from the memos alone (their tenant at its limit
    for their size, `tfail`; their user at a cap for it, `ufail`; or their shape failed
    already, `failed_shape`, but for work that may reclaim now where the failure was work not
    yet due, `not_due`): (the index of the first that does not, their reasons in order)."""
    whys: list[str] = []
    add = whys.append
    t_milli, t_why = tfail if tfail is not None else (0, "")
    user = ufail.get
    shaped = failed_shape.get
    end = len(q)
    while i < end:
        _, w, shape, milli = q[i]
        if tfail is not None and milli >= t_milli:
            add(t_why)
        else:
            uf = user(w.owner) if ufail else None
            if uf is not None and milli >= uf[0]:
                add(uf[1])
            else:
                why = shaped(shape)
                if why is None or (
                    not_due and shape in not_due and reclaim_due(w, now, reclaim_after_s)
                ):
                    break  # it failed for work not yet due; this one is
                add(why)
        i += 1
    return i, whys


def shape_run(q: list[Candidate], i: int, failed_shape: dict[Shape, str]) -> tuple[int, list[str]]:
    """`memo_run` with no limit or cap hit and no failure of work not yet due: the entries
    from `q[i]` on whose shape failed already, read in one tight loop."""
    whys: list[str] = []
    add = whys.append
    shaped = failed_shape.get
    for c in map(q.__getitem__, range(i, len(q))):  # (islice would step over q[:i] first)
        why = shaped(c[2])
        if why is None:
            break
        add(why)
    return i + len(whys), whys
