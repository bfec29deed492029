"""The scheduler's inputs and outputs. This is the contract between the pure scheduling core
and everything that calls it (server loop, simulator, tests).

`cycle(snapshot, pending, now, config) -> Decisions` never mutates its inputs and never does I/O.
"""

from __future__ import annotations

import gc
from collections.abc import (
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import islice, repeat
from operator import attrgetter, itemgetter
from typing import Any

from gpupool.domain import Allocation, Enforcement, Node, TenantTree, Workload

#: node label keys that say which nodes are close, closest first (multi-node placement,
#: gpupool.scheduler.gangs): an NVLink domain, a switch, a rack, a zone
DEFAULT_TOPOLOGY_KEYS: tuple[str, ...] = (
    "nvidia.com/gpu.clique",
    "topology.gpupool.io/switch",
    "topology.gpupool.io/rack",
    "topology.kubernetes.io/zone",
)


class Policy(StrEnum):
    FAIR = "fair"  # gpupool: quotas, hierarchical fair share, reclaim, backfill
    FIFO = "fifo"  # baseline: first come first served, whole GPUs, no quotas, no preemption
    LAS = "las"  # least attained service (Tiresias-like), research reference


class BorrowOrder(StrEnum):
    """How the `fair` policy ranks tenants that are at or over their guarantee (borrowers)."""

    #: least attained GPU-service (Snapshot.attained_service) per unit of weight first:
    #: capacity beyond the guarantees goes to the teams that have used least (Tiresias-like)
    SERVICE = "service"
    #: lowest current allocation / fair share first (max-min fair on what is held now)
    USAGE = "usage"


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """An active workload (admitted, starting or running) and the allocation it holds."""

    workload: Workload
    allocation: Allocation
    #: True once a preemption (or cancel) was asked for and the caller is stopping it: its
    #: resources are still held, but the scheduler counts them as about to be freed and does
    #: not pick more victims for the same need.
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster as the scheduler sees it at the start of a cycle."""

    nodes: tuple[Node, ...]
    tenants: TenantTree
    running: tuple[RunningWorkload, ...] = ()
    #: GPU-seconds each tenant has attained so far (used by the LAS policy), milli-GPU-seconds;
    #: under a workload id, what that workload attained in earlier attempts (`las`, and
    #: `fair` with `service_levels_s`)
    attained_service: dict[str, float] = field(default_factory=dict)
    #: pending workload id -> the nodes where work was preempted for it in an earlier cycle
    #: (the nodes of the victims of the Preemptions with `for_workload` = the id; one node,
    #: or N for a multi-node request; callers keep them with `followup.Nominations`). `fair`
    #: keeps them for it (like Kubernetes' nominatedNodeName), so the reclaimed capacity is
    #: not taken by other work before it starts. Empty: no nominations.
    nominated: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: the pool's run-length scale, GPU-seconds, that relative service levels are multiples
    #: of (`SchedulerConfig.service_levels_relative`): kept by the caller with
    #: `gpupool.scheduler.levelscale.LevelScale` (a Kaplan-Meier quantile of recently started
    #: runs, finished or not). 0: none yet, the absolute `service_levels_s` apply.
    service_scale: float = 0.0


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    policy: Policy = Policy.FAIR
    preemption: bool = True
    #: Work that has run less than this is never preempted.
    min_runtime_s: float = 300.0
    #: Guaranteed work preempts borrowed work only once it has waited this long since it was
    #: submitted: a shortfall that completions fill within this time costs no preemption.
    #: Meanwhile it reserves a node, so borrowers cannot take what frees up. Work already
    #: stopping is claimed at any time (it costs nothing more). 0: reclaim at once. The
    #: default of 10 minutes is measured on the Philly trace (docs/report-philly.md).
    reclaim_after_s: float = 600.0
    #: Before `reclaim_after_s`, guaranteed work may already reclaim borrowed work that
    #: declares `checkpointing`, or move such work (`defrag_moves`): stopping it throws no
    #: progress away (it resumes from its checkpoint), so the wait would only leave the
    #: guarantee short. False: every reclaim and move waits `reclaim_after_s`.
    reclaim_checkpointing_at_once: bool = True
    #: (fair) order of the tenants that borrow; tenants below their guarantee always come first
    borrow_order: BorrowOrder = BorrowOrder.USAGE
    backfill: bool = True
    #: Enforcement recorded on fractional shares of `shared` GPUs (`mps` when the executor runs
    #: MPS daemons, `policed` otherwise). MIG GPUs are `hardware`, other whole GPUs `policed`.
    shared_enforcement: Enforcement = Enforcement.POLICED
    #: Stop after this many admissions in one cycle (None: no cap).
    max_admissions_per_cycle: int | None = None
    #: node label keys for multi-node placement, closest first (gpupool.scheduler.gangs)
    topology_keys: tuple[str, ...] = DEFAULT_TOPOLOGY_KEYS
    #: how many blocked multi-node requests may hold nodes in one cycle (under every policy):
    #: the first ones in queue order; 0: gangs reserve nothing (small work may starve them)
    gang_reservations: int = 1
    #: (fair) service levels inside a tenant, Tiresias-style discretized least attained
    #: service: thresholds of attained GPU-seconds; a workload's level is how many it has
    #: passed. Inside a tenant, lower levels go first, and waiting work preempts the tenant's
    #: own `checkpointing` work `preempt_levels_apart` or more levels above it
    #: (gpupool.scheduler.levels). Only work that declares checkpointing gains service levels
    #: or is preempted for them. Default 0.5, 5 and 50 GPU-hours (measured in
    #: docs/report-philly.md); empty: off.
    service_levels_s: tuple[float, ...] = (1800.0, 18000.0, 180000.0)
    #: (fair) service levels relative to the pool's own time scale: the thresholds are these
    #: multiples of `Snapshot.service_scale` (the `service_levels_quantile` of the run lengths
    #: of recently started runs, in GPU-seconds, estimated by the caller with
    #: `levelscale.LevelScale`) instead of `service_levels_s`, which apply while there is no
    #: scale yet (a fresh pool). Default 0.2 / 2 / 20 x the p80 run length (issue 32, session
    #: 18: at the server's 2 s cadence it shortened the wait on the burst and Philly workloads
    #: and kept the guarantees better than the absolute ladder). Empty: absolute levels only;
    #: an empty `service_levels_s` turns service levels off, relative ones too.
    service_levels_relative: tuple[float, ...] = (0.2, 2.0, 20.0)
    #: (fair, relative levels) the quantile of the run lengths that the scale is
    service_levels_quantile: float = 0.8
    #: (fair, relative levels) the scale moves only when a new estimate differs from it by more
    #: than this factor (either way), so the ladder does not move with every finished run
    service_levels_hysteresis: float = 1.5
    #: (fair, relative levels) how many recently started runs the scale is estimated from
    #: (the caller keeps them; each counted once, from its first start)
    service_levels_window: int = 5000
    #: (fair, service levels) waiting work preempts its tenant's own work only when that is at
    #: least this many levels above its own. 1: any higher level; the default 2 leaves work of
    #: a similar size alone (preempting it at every threshold made everyone's wait longer:
    #: docs/report-philly.md).
    preempt_levels_apart: int = 2
    #: (fair, service levels) a waiting `checkpointing` workload takes the service level of its
    #: siblings when that is higher than its own: the most service attained so far by
    #: `checkpointing` work (running, or waiting again) of the same tenant, owner and GPU request
    #: submitted within this many seconds of it (the runs of one sweep share a time scale, so
    #: the rest of a sweep whose first runs have run long waits behind fresh work). 0: off
    #: (gpupool.scheduler.levels; issue 32, session 19: with the two options below, the
    #: burst workload waits 0.50 instead of 0.58 x fifo, docs/scheduler.md)
    service_levels_siblings_s: float = 600.0
    #: (fair, service levels) inside a level, waiting work is ordered by its service (its own
    #: kept service, or its siblings') before its submit time: least attained first
    service_levels_fine_order: bool = True
    #: (fair) reclaim takes `checkpointing` victims (a restart loses only their checkpoint)
    #: before others of the same priority, the most attained service first; False: the least
    #: progress first, whatever the kind (gpupool.scheduler.preemption)
    reclaim_checkpointing_by_service: bool = True
    #: (fair) work owed GPUs that reclaim cannot place may have smaller `checkpointing` work
    #: moved off one node to free places on others (gpupool.scheduler.defrag)
    defrag_moves: bool = True
    #: (fair) nodes held for a blocked gang do not sit idle while they drain: one-node
    #: `checkpointing` work that would borrow may run on them, and is stopped (it resumes from
    #: its checkpoint) once the gang, having waited `reclaim_after_s`, fits there without it
    #: (gpupool.scheduler.gangreclaim). False: held nodes drain (docs/scheduler.md).
    gang_hold_backfill: bool = True
    #: (fair) a gang within its tenant's guarantee that reclaim cannot place, having waited
    #: `reclaim_after_s`, stops `checkpointing` work of its own tenant or of tenants above
    #: their guarantee on the N nodes that need the fewest victims, so that it starts
    #: instead of waiting for nodes to drain (gpupool.scheduler.gangreclaim)
    gang_clears_nodes: bool = True
    #: (gang_clears_nodes) the work it stops has run at least this long, or `min_runtime_s`
    #: where that is shorter: it checkpoints, so it loses no progress, and on a cluster of
    #: minutes-long jobs some work younger than `min_runtime_s` runs on nearly every node
    gang_clears_min_runtime_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Admission:
    workload_id: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop `workload_id` so that `for_workload` can get its guaranteed share (or, with
    service levels, its turn). With `move_to`, the stopped workload is moved: a place on
    that node is kept for it (gpupool.scheduler.defrag)."""

    workload_id: str
    for_workload: str
    reason: str
    move_to: str | None = None


class WaitKind(StrEnum):
    """What a `Wait` describes."""

    #: its tenant is owed the GPUs (within its guarantee): they will be reclaimed at `until`
    #: from `victims` unless capacity frees up before
    OWED = "owed"
    #: work was preempted for it (`victims`) or is stopping; it starts once that has ended
    RECLAIMING = "reclaiming"
    #: it holds a reservation on `node` and waits for capacity there
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Wait:
    """The structured part of a reason, for the waits that end at a known time or event.
    Times are on the scheduler's clock (`now`), in seconds."""

    kind: WaitKind
    #: GPUs (milli) its tenant is owed
    owed_milli: int = 0
    #: workloads that are (or will be) preempted for it
    victims: tuple[str, ...] = ()
    #: when the scheduler reclaims the GPUs (OWED)
    until: float | None = None
    #: the node reserved for it (RESERVED, OWED when it also holds one)
    node: str | None = None
    #: when the running work it waits for reaches its max runtime at the latest: it can start
    #: then unless work ahead of it comes first (None: some of that work has no max runtime)
    expected_start: float | None = None


@dataclass(frozen=True, slots=True)
class PendingInfo:
    """Why a workload still waits. `position` is 1-based within its tenant's queue; `wait`
    carries the structure of waits that end at a known time or event (else None)."""

    reason: str
    position: int
    tenant_position: int
    wait: Wait | None = None


_PI: Any = PendingInfo
_new = object.__new__
_set_reason = _PI.reason.__set__
_set_position = _PI.position.__set__
_set_tenant_position = _PI.tenant_position.__set__
_set_wait = _PI.wait.__set__


def pending_info(reason: str, position: int, tenant_position: int) -> PendingInfo:
    """`PendingInfo(reason, position, tenant_position)` (no wait), built through its slots
    rather than the frozen dataclass's __init__: the same object, about twice as cheap (a
    cycle makes one per waiting workload)."""
    pi = _new(PendingInfo)
    _set_reason(pi, reason)
    _set_position(pi, position)
    _set_tenant_position(pi, tenant_position)
    _set_wait(pi, None)
    return pi


_id_of = attrgetter("id")
_workload_of = itemgetter(1)
_shape_of = itemgetter(2)


class PendingInfos(MutableMapping[str, PendingInfo]):
    """Workload id -> `PendingInfo` of one cycle's waiting work (`Decisions.pending`).

    A cycle answers most of a queue at once: from some position on, every entry waits for
    one reason (its tenant at its limit) or for the reason its shape already failed with.
    Such a run is kept as (queue, first index, reason or reason per shape, first position,
    tenant position), and its `PendingInfo`s are built on the first read of the mapping,
    all at once (the cycle itself does not pay for the ~50,000 of a big queue; whoever
    reads them all, as the server loop and the simulator do, pays the same as before). The
    values are the same as if each one had been built in the walk. Writes (the cycle's
    waits and requeue notes) replace an entry."""

    __slots__ = ("_one", "_runs", "_count", "_suffix")

    def __init__(self, one: dict[str, PendingInfo] | None = None):
        #: entries built one by one (and, once read, every entry)
        self._one: dict[str, PendingInfo] = one if one is not None else {}
        #: runs not built yet: (queue, start, stop, one reason | reason per shape, first
        #: position, tenant position)
        self._runs: list[tuple[Sequence[Any], int, int, Any, int, int]] = []
        self._count = 0
        #: text to add to the reason of entries of runs not built yet (`add_to_reason`)
        self._suffix: dict[str, str] = {}

    def put(self, wid: str, info: PendingInfo) -> None:
        """The cycle's own write of one entry (no run holds `wid`)."""
        self._one[wid] = info

    def add_run(
        self,
        queue: Sequence[Any],
        start: int,
        why: str | list[str] | Mapping[Any, str],
        position: int,
        tenant_position: int,
        stop: int | None = None,
    ) -> None:
        """Entries `queue[start:stop]` (queue entries are (key, workload, shape, ...); the
        queue is never changed afterwards) wait for `why` (one reason, the reason of each
        entry, or the reason per shape: a snapshot), at positions `position`, `position` + 1,
        ...; none of them is in the mapping yet."""
        stop = len(queue) if stop is None else stop
        if stop > start:
            self._runs.append((queue, start, stop, why, position, tenant_position))
            self._count += stop - start

    def add_to_reason(self, wid: str, text: str) -> None:
        """Add `text` to the reason of `wid`'s entry, if it has one (without building runs)."""
        pi = self._one.get(wid)
        if pi is not None:
            self._one[wid] = _with_reason(pi, pi.reason + text)
        elif self._runs:
            self._suffix[wid] = self._suffix.get(wid, "") + text

    def _built(self) -> dict[str, PendingInfo]:
        if self._runs:
            was_enabled = gc.isenabled()
            gc.disable()  # as in cycle(): many small objects at once
            try:
                self._build()
            finally:
                if was_enabled:
                    gc.enable()
        return self._one

    def _build(self) -> None:
        if self._runs:
            one = self._one
            for q, i, j, why, pos, rank in self._runs:
                m = j - i
                ids = map(_id_of, map(_workload_of, islice(q, i, j)))
                whys: Iterator[str]
                if isinstance(why, str):
                    whys = repeat(why, m)
                elif isinstance(why, list):
                    whys = iter(why)
                else:
                    whys = map(why.__getitem__, map(_shape_of, islice(q, i, j)))
                infos = map(pending_info, whys, range(pos, pos + m), repeat(rank, m))
                one.update(zip(ids, infos, strict=True))
            self._runs = []
            self._count = 0
            for wid, text in self._suffix.items():
                pi = one.get(wid)
                if pi is not None:
                    one[wid] = _with_reason(pi, pi.reason + text)
            self._suffix = {}

    def __getitem__(self, wid: str) -> PendingInfo:
        pi = self._one.get(wid)
        return pi if pi is not None else self._built()[wid]

    def __setitem__(self, wid: str, info: PendingInfo) -> None:
        if wid in self._one:
            self._one[wid] = info
        else:
            self._built()[wid] = info

    def __delitem__(self, wid: str) -> None:
        del self._built()[wid]

    def __contains__(self, wid: object) -> bool:
        return wid in self._one or wid in self._built()

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._one) + self._count

    # the views of the built entries themselves: reading every entry (the server loop stores
    # them all) costs no call per entry, where Mapping's own views make two
    def keys(self) -> KeysView[str]:
        return self._built().keys()

    def items(self) -> ItemsView[str, PendingInfo]:
        return self._built().items()

    def values(self) -> ValuesView[PendingInfo]:
        return self._built().values()

    def __repr__(self) -> str:
        return f"PendingInfos({self._built()!r})"


def _with_reason(pi: PendingInfo, reason: str) -> PendingInfo:
    return PendingInfo(reason, pi.position, pi.tenant_position, pi.wait)


@dataclass(frozen=True, slots=True)
class CycleStats:
    candidates_considered: int = 0
    admitted: int = 0
    preempted: int = 0


@dataclass(frozen=True, slots=True)
class Decisions:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    #: workload id -> why it still waits (every pending workload not admitted is here;
    #: a `PendingInfos` from `cycle()`, whose entries are built on first read)
    pending: Mapping[str, PendingInfo] = field(default_factory=dict)
    #: workload id -> why it can never run (no node could ever hold it); callers fail these
    unschedulable: dict[str, str] = field(default_factory=dict)
    #: tenant -> fair share in milli-GPU computed this cycle
    fair_shares: dict[str, int] = field(default_factory=dict)
    stats: CycleStats = CycleStats()
