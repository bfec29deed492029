"""Step 1 of a cycle: pending work -> per-tenant queues in policy order.

`Queues(snapshot, policy, hardware, cache, config).classify(pending)` sorts out unschedulable
work (unknown or inner tenant, a request no node or no limit could ever allow, each with its
reason) and files the rest into per-tenant queues of `Candidate`s, sorted by policy order,
with each tenant's GPU demand. What it works out per workload, and each tenant's sorted queue
while its run of `pending` is the same workloads, are kept in the cache (gpupool.scheduler.
cache) for the next cycle. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter

from gpupool.domain import Request, Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.levels import level_of
from gpupool.scheduler.limits import never_within_limits
from gpupool.scheduler.ordering import (
    fifo_key,
    in_tenant_key,
    las_in_tenant_key,
    leveled_in_tenant_key,
)
from gpupool.scheduler.placement import shape_of
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.types import Policy, SchedulerConfig, Snapshot

_NO_SERVICE: dict[str, float] = {}
_tenant_of = attrgetter("tenant")

#: (order key, workload, shape, GPU milli)
Candidate = tuple[tuple, Workload, Shape, int]


class _Run:
    """One tenant's classified run of pending work: its sorted queue, demand and
    unschedulable workloads (kept in the cache's memo; read-only once built)."""

    __slots__ = ("workloads", "ids", "queue", "demand", "unschedulable")

    def __init__(
        self,
        workloads: tuple[Workload, ...],
        ids: frozenset[str],
        queue: list[Candidate],
        demand: int,
        unschedulable: tuple[tuple[str, str], ...],
    ) -> None:
        self.workloads: tuple[Workload, ...] = workloads
        self.ids: frozenset[str] = ids
        self.queue: list[Candidate] = queue
        self.demand: int = demand
        self.unschedulable: tuple[tuple[str, str], ...] = unschedulable

    @staticmethod
    def of(
        qs: Queues,
        ws: tuple[Workload, ...],
        entries: dict[int, tuple],
        shapes: dict[tuple[str, Request], tuple[Shape, str | None, int]],
        tenant_why: dict[str, str | None],
        whole_only: bool,
    ) -> _Run | None:
        """Classify `ws` (None if a workload is listed twice)."""
        ids = frozenset(w.id for w in ws)
        if len(ids) != len(ws):
            return None
        queue: list[Candidate] = []
        unsched: list[tuple[str, str]] = []
        demand = 0
        for w in ws:
            e = entries.get(id(w))
            if e is None or e[0] is not w:
                e = qs._entry(w, entries, shapes, tenant_why, whole_only)
            if e[1] is not None:
                unsched.append((w.id, e[1]))
            else:
                queue.append(e[3])
                demand += e[2]
        queue.sort()
        return _Run(ws, ids, queue, demand, tuple(unsched))


class Tail:
    """Per position of a sorted queue: the workload ids, the shapes, and (for the rest of the
    queue from there) the smallest GPU milli and the set of shapes (used by the cycle to
    answer the rest of a queue at once)."""

    __slots__ = ("ids", "shapes", "min_milli", "shape_sets")

    def __init__(self, q: list[Candidate]):
        self.ids = [e[1].id for e in q]
        self.shapes = [e[2] for e in q]
        n = len(q)
        self.min_milli = [0] * n
        self.shape_sets: list[frozenset[Shape]] = [frozenset()] * n
        low = None
        shapes: frozenset[Shape] = frozenset()
        for j in range(n - 1, -1, -1):
            _, _, shape, milli = q[j]
            if low is None or milli < low:
                low = milli
            if shape not in shapes:
                shapes = shapes | {shape}
            self.min_milli[j] = low
            self.shape_sets[j] = shapes


class Queues:
    """The classification of one cycle's pending work; read `unschedulable` (workload id ->
    reason), `queues` (tenant -> sorted candidates) and `pending_demand` (tenant -> GPU milli)
    after `classify`."""

    def __init__(
        self,
        snap: Snapshot,
        policy: Policy,
        hardware: Hardware,
        cache: SchedulerCache,
        config: SchedulerConfig,
    ):
        self.snap = snap
        self.tree = snap.tenants
        self.policy = policy
        self.quotas = policy is Policy.FAIR
        self.hardware = hardware
        self.cache = cache
        self.config = config
        self.unschedulable: dict[str, str] = {}
        self.queues: dict[str, list[Candidate]] = {}
        self.pending_demand: dict[str, int] = {}

    def classify(self, pending: Sequence[Workload]) -> None:
        """Unschedulable work out; the rest into per-tenant queues, sorted by policy order.

        Queue entries are (order key, workload, shape, GPU milli); keys end with the workload
        id, so they are unique and plain tuple comparison sorts them. With a cache, what is
        worked out per workload is carried over to the next cycle, and so is each tenant's
        sorted queue while its run of `pending` is the same workloads (see `_classify_runs`)."""
        whole_only = self.policy is Policy.FIFO
        memo = self.cache.classified(self.hardware, self.tree, self.config, len(pending))
        if self._classify_runs(pending, memo.entries, memo.runs, whole_only):
            return
        entries = memo.entries  # updated in place: this cycle's workloads are added
        seen = {rw.workload.id for rw in self.snap.running}
        las = self.policy is Policy.LAS
        levels = self.config.service_levels_s if self.policy is Policy.FAIR else ()
        shapes: dict[tuple[str, Request], tuple[Shape, str | None, int]] = {}
        tenant_why: dict[str, str | None] = {}
        queues = self.queues
        demand = self.pending_demand
        attained = self.snap.attained_service
        unschedulable = self.unschedulable
        for w in pending:
            wid = w.id
            if wid in seen:
                continue  # already running (or listed twice): nothing to decide
            seen.add(wid)
            e = entries.get(id(w))
            if e is None or e[0] is not w:
                e = self._entry(w, entries, shapes, tenant_why, whole_only)
            if e[1] is not None:
                unschedulable[wid] = e[1]
                continue
            t = w.tenant
            q = queues.get(t)
            if q is None:
                q = queues[t] = []
                demand[t] = 0
            entry = e[3]
            if las and wid in attained:  # the carried key has 0 attained service
                entry = ((attained[wid], *entry[0][1:]), *entry[1:])
            elif levels and wid in attained:  # the carried key has level 0
                k = entry[0]
                entry = ((k[0], level_of(attained[wid], levels), *k[2:]), *entry[1:])
            q.append(entry)
            demand[t] += e[2]
        for q in queues.values():
            q.sort()

    def _entry(
        self,
        w: Workload,
        entries: dict[int, tuple],
        shapes: dict[tuple[str, Request], tuple[Shape, str | None, int]],
        tenant_why: dict[str, str | None],
        whole_only: bool,
    ) -> tuple:
        """(workload, why unschedulable, GPU milli, queue entry) of `w`, filed in `entries`."""
        t = w.tenant
        mk = (t, w.request)
        hit = shapes.get(mk)
        if hit is None:
            if t not in tenant_why:
                tenant_why[t] = self._tenant_problem(t)
            shape = shape_of(w.request, whole_only)
            why = tenant_why[t] or self.hardware.never_fits(shape)
            if why is None and self.quotas:
                why = never_within_limits(self.tree, t, shape.gpu_milli)
            hit = shapes[mk] = (shape, why, shape.gpu_milli)
        if self.policy is Policy.FAIR and self.config.service_levels_s:
            key = leveled_in_tenant_key(w, 0)  # level added by the caller
        elif self.policy is Policy.FAIR:
            key = in_tenant_key(w)
        elif self.policy is Policy.FIFO:
            key = fifo_key(w)
        else:
            key = las_in_tenant_key(w, _NO_SERVICE)  # attained service added by the caller
        e = entries[id(w)] = (w, hit[1], hit[2], (key, w, hit[0], hit[2]))
        return e

    def _classify_runs(
        self,
        pending: Sequence[Workload],
        entries: dict[int, tuple],
        runs: dict[str, _Run],
        whole_only: bool,
    ) -> bool:
        """Classify tenant by tenant, reusing a tenant's queue from an earlier cycle while its
        run of `pending` is the same workloads. Works when `pending` lists each tenant's work
        in one run (as the simulator does), no workload twice, none running and (LAS) none
        with attained service of its own; returns False, having changed nothing, otherwise
        (then the caller classifies workload by workload: the same result)."""
        out: list[tuple[str, _Run]] = []
        tenants: set[str] = set()
        ids: set[str] = set()
        total = 0
        shapes: dict[tuple[str, Request], tuple[Shape, str | None, int]] = {}
        tenant_why: dict[str, str | None] = {}
        for t, group in groupby(pending, _tenant_of):
            if t in tenants:
                return False  # the tenant's work is not in one run
            tenants.add(t)
            ws = tuple(group)
            r = runs.get(t)
            if r is None or r.workloads != ws:
                r = _Run.of(self, ws, entries, shapes, tenant_why, whole_only)
                if r is None:
                    return False
                runs[t] = r
            out.append((t, r))
            total += len(r.ids)
            ids |= r.ids
        if len(ids) != total:
            return False  # a workload listed twice
        if not ids.isdisjoint(rw.workload.id for rw in self.snap.running):
            return False
        if self.policy is Policy.LAS and not ids.isdisjoint(self.snap.attained_service):
            return False
        if (
            self.policy is Policy.FAIR
            and self.config.service_levels_s
            and not ids.isdisjoint(self.snap.attained_service)
        ):
            return False
        for t, r in out:
            self.unschedulable.update(r.unschedulable)
            if r.queue:
                self.queues[t] = r.queue
                self.pending_demand[t] = r.demand
        return True

    def _tenant_problem(self, t: str) -> str | None:
        if t not in self.tree:
            return f"unknown tenant {t!r}; ask an admin to add it"
        if not self.tree.is_leaf(t):
            return (
                f"tenant {t} has sub-tenants; only leaf tenants hold work "
                f"(submit to one of {', '.join(self.tree.children(t))})"
            )
        return None

    # -- 3. the walk -----------------------------------------------------------------------
