"""Node pools (issue 34): which waiting work needs new nodes, how many of which pool, which
idle nodes go back, which requests for nodes are withdrawn. Pure: no I/O, the clock given.

Two steps, both fed by narrow inputs so that the server loops and the simulator share them:

1. `capacity_bound(snapshot, pending, decisions)`: the pending workloads that wait for
   capacity, and for nothing else. Work the cycle admitted, work that can never run, work at
   its tenant's (or user's) limit, work held by the caller for another reason (`held`: a
   budget, a failed start backing off), work that waits for preempted work to end, and work
   that would fit the capacity left free after the cycle (it waits for its place in line, not
   for a node) are left out.
2. `plan(pools, waiting, busy, now)`: per pool, the nodes to ask for (the fewest that hold the
   waiting shapes, cheapest pool first, a gang's nodes in one atomic request), the open
   requests to withdraw (not fulfilled within the pool's `request_timeout_seconds`), the idle
   nodes to give back (idle for `idle_seconds`, never below `min_nodes`), and the reason each
   waiting workload it concerns gets ("waiting for a node of pool gpu-h100 (booting, ~4
   min)").

A pool whose request was withdrawn for its timeout gets no new request for the same time
again (`PoolView.withdrawn_at`): work that could only use it then says so in its reason and
waits for capacity like any other; nothing waits on a node that does not come.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from gpupool.domain import MILLI_PER_GPU, TenantTree, Workload
from gpupool.domain.nodepools import (
    NodePool,
    NodeRequest,
    PoolNode,
    PoolNodeState,
    RequestState,
)
from gpupool.domain.placement import ENGINE_LABEL, MULTI_NODE_LABEL
from gpupool.scheduler.capacity import MIG, CapacityIndex
from gpupool.scheduler.feasibility import never_runs, request_shape
from gpupool.scheduler.gangs import find_gang, is_gang
from gpupool.scheduler.limits import Usage, limit_check
from gpupool.scheduler.placement import find_placement
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.types import (
    Decisions,
    Policy,
    RunningWorkload,
    Snapshot,
    WaitKind,
    pending_info,
)

UP = PoolNodeState.UP
BOOTING = PoolNodeState.BOOTING


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool as `plan` sees it: its definition, its nodes (any state) and its open
    requests; `withdrawn_at`: when its last request was withdrawn for its timeout (None:
    never, or long ago)."""

    pool: NodePool
    nodes: tuple[PoolNode, ...] = ()
    requests: tuple[NodeRequest, ...] = ()
    withdrawn_at: float | None = None

    def count(self, state: PoolNodeState) -> int:
        return sum(1 for n in self.nodes if n.state is state)

    def en_route(self) -> int:
        """Nodes asked for and not yet up: the open requests' counts."""
        return sum(r.count for r in self.requests if r.state is RequestState.OPEN)


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """Ask pool `pool` for `nodes` nodes for `for_workloads` (all or none when `atomic`)."""

    pool: str
    nodes: int
    for_workloads: tuple[str, ...]
    atomic: bool = False


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """Give node `node` of pool `pool` back: idle since `idle_since`."""

    pool: str
    node: str
    idle_since: float


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """Withdraw request `request` of pool `pool`; `reason` says why."""

    request: str
    pool: str
    reason: str
    for_workloads: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AutoscalePlan:
    scale_up: tuple[ScaleUp, ...] = ()
    scale_down: tuple[ScaleDown, ...] = ()
    withdrawals: tuple[Withdrawal, ...] = ()
    #: waiting workload id -> its reason, for the work that waits for a pool's node
    reasons: dict[str, str] = field(default_factory=dict)


def request_milli(w: Workload) -> int:
    """GPU milli a workload holds once admitted (a MIG instance counts as its GPU)."""
    r = w.request
    if r.gpus:
        return r.gpus * MILLI_PER_GPU
    if r.mig:
        return MILLI_PER_GPU
    return r.gpu_milli


# -- 1. which waiting work waits for capacity -----------------------------------------------


def capacity_bound(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    decisions: Decisions,
    held: Collection[str] = (),
    *,
    policy: Policy = Policy.FAIR,
) -> list[Workload]:
    """The workloads of `pending` (in their order) that wait for capacity and nothing else
    after the cycle that made `decisions` (see the module's docstring). Whether one would
    fit what is free is the scheduler's own placement (`find_placement`, `find_gang`) on
    the capacity left after the cycle's admissions, its shape as `policy` places it."""
    admitted = {a.workload_id: a.allocation for a in decisions.admissions}
    usage = Usage(snapshot.tenants)
    for r in snapshot.running:
        usage.add(r.workload.tenant, r.workload.owner, r.allocation.gpu_milli)
    by_id = {w.id: w for w in pending}
    taken = list(snapshot.running)
    for wid, alloc in admitted.items():
        w = by_id.get(wid)
        if w is not None:
            usage.add(w.tenant, w.owner, alloc.gpu_milli)
            taken.append(RunningWorkload(w, alloc))
    free = CapacityIndex(snapshot.nodes, tuple(taken))
    out: list[Workload] = []
    for w in pending:
        info = decisions.pending.get(w.id)
        if info is None or w.id in held or w.id in decisions.unschedulable:
            continue
        if info.wait is not None and info.wait.kind is WaitKind.RECLAIMING:
            continue  # preempted work is ending for it
        if limit_check(usage, w.tenant, w.owner, request_milli(w)) is not None:
            continue  # waits on its quota or limit: a node would not let it run
        shape = request_shape(w.request, policy)
        fits = find_gang(free, shape) if is_gang(shape) else find_placement(free, shape)
        if fits is not None:
            continue  # it fits what is free: it waits for its turn, not for a node
        out.append(w)
    return out


def rescue(
    d: Decisions,
    pending: Sequence[Workload],
    pools: Sequence[NodePool],
    tree: TenantTree,
    policy: Policy,
) -> Decisions:
    """`d` with the work no present node could ever hold, but the nodes of one of `pools`
    could (`feasibility.never_runs` asked with the pool's nodes: its hardware, the tenant,
    the limits under `policy`), moved from `unschedulable` back to waiting."""
    if not d.unschedulable or not pools:
        return d
    by_id = {w.id: w for w in pending}
    saved = {
        wid
        for wid in d.unschedulable
        if (w := by_id.get(wid)) is not None
        and any(
            never_runs(w.request, w.tenant, tree, pool_hardware(p), policy, fixed_mig_layouts=True)
            is None
            for p in pools
        )
    }
    if not saved:
        return d
    return dataclasses.replace(
        d,
        unschedulable={k: v for k, v in d.unschedulable.items() if k not in saved},
        pending={
            **d.pending,
            **{w: pending_info("waiting for a node of a pool", 0, 0) for w in saved},
        },
    )


# -- 2. the plan ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def pool_hardware(pool: NodePool) -> Hardware:
    """What `pool` could hold, as the scheduler's feasibility rule sees nodes: `max_nodes`
    nodes of its shape (`NodePool.node`; a gang needs several), exclusive GPUs without a
    MIG layout. A pool of one engine gets its engine label (and may hold gangs: the engine
    that runs a pool's nodes is asked for a gang's nodes at once)."""
    extra = ((ENGINE_LABEL, pool.engine), (MULTI_NODE_LABEL, "true")) if pool.engine else ()
    return Hardware(tuple(pool.node(f"{pool.name}-{i}", extra) for i in range(pool.max_nodes)))


def serves(pool: NodePool, w: Workload, policy: Policy) -> bool:
    """Whether one node of `pool` could hold `w` (a gang: its part on each node; how many
    nodes the pool may have is `plan`'s to count) under `policy`: the hardware part of
    `feasibility.never_runs` (a MIG instance never: pool nodes come without a layout)."""
    shape = request_shape(w.request, policy)
    return shape.kind != MIG and pool_hardware(pool).never_fits(shape._replace(nodes=1)) is None


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60))


def waiting_reason(pool: NodePool, state: PoolNodeState, ready_in_s: float, nodes: int) -> str:
    """'waiting for a node of pool gpu-h100 (booting, ~4 min): 1 node of 8 H100 requested'."""
    what = f"{pool.gpus} {pool.gpu_model}" if pool.gpus else f"{pool.cpu_milli // 1000} CPUs"
    n = f"{nodes} node" + ("" if nodes == 1 else "s")
    return (
        f"waiting for a node of pool {pool.name} ({state}, ~{_minutes(ready_in_s)} min): "
        f"{n} of {what} requested"
    )


class _Bin:
    """A new node being filled with waiting work in `plan`."""

    __slots__ = ("gpus", "milli", "cpu", "mem", "joining")

    def __init__(self, pool: NodePool, joining: str = "") -> None:
        #: the reason of work placed on it when it stands for a node on its way (an up node
        #: the scheduler has not seen yet, or a node of an open request); "": a new node
        self.joining = joining
        self.gpus = pool.gpus
        self.milli = 0  # milli left on the fraction GPU opened last (0: none open)
        self.cpu = pool.cpu_milli
        self.mem = pool.memory_mib

    def add(self, w: Workload) -> bool:
        r = w.request
        if r.cpu_milli > self.cpu or r.memory_mib > self.mem:
            return False
        if r.gpus:
            if r.gpus > self.gpus:
                return False
            self.gpus -= r.gpus
        elif r.gpu_milli:
            if self.milli < r.gpu_milli:
                if not self.gpus:
                    return False
                self.gpus -= 1
                self.milli = MILLI_PER_GPU
            self.milli -= r.gpu_milli
        self.cpu -= r.cpu_milli
        self.mem -= r.memory_mib
        return True


def plan(
    pools: Sequence[PoolView],
    waiting: Sequence[Workload],
    busy: Collection[str],
    now: float,
    seen: Collection[str] | None = None,
    *,
    policy: Policy = Policy.FAIR,
) -> AutoscalePlan:
    """What to ask for, withdraw and give back (see the module's docstring). `waiting` is
    `capacity_bound`'s answer, in queue order; `busy` the nodes that hold gpupool work;
    `seen` the nodes the cycle that found `waiting` saw: up nodes of a pool that it did not
    see are joining, and hold waiting work before new nodes are asked for (None: all seen);
    `policy` the scheduler's (`serves`: under `fifo` a fraction takes a whole GPU)."""
    withdrawals: list[Withdrawal] = []
    reasons: dict[str, str] = {}
    by_id = {w.id: w for w in waiting}
    waiting_ids = set(by_id)
    en_route_bins: dict[str, list[_Bin]] = {}
    covered: set[str] = set()
    headroom: dict[str, int] = {}
    blocked: dict[str, float] = {}
    for v in pools:
        p = v.pool
        open_reqs = []
        for r in v.requests:
            if r.state is not RequestState.OPEN:
                continue
            if now >= r.deadline(p):
                why = (
                    f"the request for {r.count} node(s) of pool {p.name} was not fulfilled "
                    f"within {_minutes(p.request_timeout_seconds)} min and was withdrawn"
                )
                withdrawals.append(Withdrawal(r.id, p.name, why, r.for_workloads))
                blocked[p.name] = now
                for wid in r.for_workloads:
                    if wid in waiting_ids:
                        reasons[wid] = f"waiting for capacity: {why}"
                continue
            open_reqs.append(r)
            booting = any(n.state is BOOTING for n in v.nodes)
            state = BOOTING if booting else PoolNodeState.REQUESTED
            why = waiting_reason(p, state, r.requested_at + p.boot_seconds - now, r.count)
            coming = [_Bin(p, why) for _ in range(r.count)] if not r.atomic else []
            for wid in r.for_workloads:
                if wid in waiting_ids:
                    covered.add(wid)
                    reasons[wid] = why
                    w = by_id[wid]
                    next((b for b in coming if b.add(w)), None)
            en_route_bins.setdefault(p.name, []).extend(coming)
        if v.withdrawn_at is not None and now - v.withdrawn_at < p.request_timeout_seconds:
            blocked.setdefault(p.name, v.withdrawn_at)
        en_route = sum(r.count for r in open_reqs)
        headroom[p.name] = max(0, p.max_nodes - v.count(UP) - en_route)
    order = sorted(
        pools, key=lambda v: (v.pool.cost_per_gpu_hour, v.pool.boot_seconds, v.pool.name)
    )
    bins: dict[str, list[_Bin]] = {
        v.pool.name: [
            _Bin(
                v.pool,
                f"waiting for a node of pool {v.pool.name}: {n.name} is up and joins the "
                "pool's nodes at the next pass",
            )
            for n in v.nodes
            if n.state is UP and seen is not None and n.name not in seen
        ]
        + en_route_bins.get(v.pool.name, [])
        for v in pools
    }
    loose: dict[str, list[str]] = {}
    ups: list[ScaleUp] = []
    for w in waiting:
        if w.id in covered:
            continue
        fits = [v.pool for v in order if serves(v.pool, w, policy)]
        usable = [p for p in fits if p.name not in blocked]
        placed = False
        for p in usable:
            if w.request.nodes > 1:
                if headroom[p.name] >= w.request.nodes:
                    headroom[p.name] -= w.request.nodes
                    ups.append(ScaleUp(p.name, w.request.nodes, (w.id,), atomic=True))
                    reasons[w.id] = waiting_reason(
                        p, PoolNodeState.REQUESTED, p.boot_seconds, w.request.nodes
                    )
                    placed = True
                    break
                continue
            open_bins = bins.setdefault(p.name, [])
            target = next((b for b in open_bins if b.add(w)), None)
            if target is None and headroom[p.name] >= 1:
                b = _Bin(p)
                if b.add(w):
                    headroom[p.name] -= 1
                    open_bins.append(b)
                    target = b
            if target is not None and target.joining:
                reasons[w.id] = target.joining
                placed = True
                break
            if target is not None:
                loose.setdefault(p.name, []).append(w.id)
                placed = True
                break
        if not placed and fits and not usable:
            p = fits[0]
            m = _minutes(p.request_timeout_seconds)
            reasons.setdefault(
                w.id,
                f"waiting for capacity: the last request for nodes of pool {p.name} was not "
                f"fulfilled within {m} min and was withdrawn; gpupool asks again {m} min after",
            )
        elif not placed and fits:
            p = fits[0]
            reasons.setdefault(
                w.id,
                f"waiting for capacity: pool {p.name} is at its maximum of {p.max_nodes} "
                "nodes (up or on their way)",
            )
    pool_of = {v.pool.name: v.pool for v in pools}
    for name, ids in loose.items():
        n = sum(1 for b in bins[name] if not b.joining)
        ups.append(ScaleUp(name, n, tuple(ids)))
        for wid in ids:
            reasons[wid] = waiting_reason(
                pool_of[name], PoolNodeState.REQUESTED, pool_of[name].boot_seconds, n
            )
    wanted = {u.pool for u in ups} | {
        p.name for w in waiting for p in (v.pool for v in pools) if serves(p, w, policy)
    }
    downs = [d for v in pools if v.pool.name not in wanted for d in _idle(v, busy, now)]
    return AutoscalePlan(tuple(ups), tuple(downs), tuple(withdrawals), reasons)


def _idle(v: PoolView, busy: Collection[str], now: float) -> list[ScaleDown]:
    """The up nodes of `v` idle for its idle_seconds, oldest idle first, above min_nodes."""
    p = v.pool
    spare = v.count(UP) - p.min_nodes
    idle = sorted(
        (n for n in v.nodes if n.state is UP and n.idle_since is not None and n.name not in busy),
        key=lambda n: (n.idle_since or 0.0, n.name),
    )
    out = []
    for n in idle:
        if spare <= 0:
            break
        assert n.idle_since is not None
        if now - n.idle_since >= p.idle_seconds:
            out.append(ScaleDown(p.name, n.name, n.idle_since))
            spare -= 1
    return out
