"""One scheduling cycle: snapshot + pending -> decisions. Pure and deterministic.

The steps (see docs/scheduler.md):
1. classify pending work (gpupool.scheduler.queues): unknown tenant, inner tenant, or a
   request no node (or no limit) could ever allow -> unschedulable; the rest goes into
   per-tenant queues;
2. fair shares by hierarchical water-filling (computed under every policy, for reporting);
3. walk the candidates in policy order; for each: limits -> placement -> admit (assume);
4. (fair) a blocked candidate within its guarantee may reclaim borrowed work; if it still
   does not fit it reserves the node it is closest to fitting on, so that GPU work behind it
   (backfill) cannot take that node (CPU-only work may, leaving the CPUs and memory the
   reservation asks for); blocked work that would borrow reserves nothing;
5. every workload not admitted gets a reason and its queue positions; waits that end at a
   known time or event (a reclaim counting down, a reservation on work with a max runtime,
   preempted work stopping) also get a `Wait` (gpupool.scheduler.waits).
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Sequence

from gpupool.domain import Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import CPU_ONLY, Shape
from gpupool.scheduler.cycle_reclaim import ReclaimSteps
from gpupool.scheduler.fairshare import fair_shares
from gpupool.scheduler.gangs import gang_reason, per_node
from gpupool.scheduler.gangwalk import GangHold, backfill_gang_nodes, place_gang
from gpupool.scheduler.levels import LevelPreemptor
from gpupool.scheduler.limits import (
    TENANT,
    Usage,
    limit_check,
)
from gpupool.scheduler.ordering import (
    fair_tenant_key,
    las_tenant_key,
)
from gpupool.scheduler.placement import (
    Placement,
    find_placement,
    place_on_node,
    to_allocation,
)
from gpupool.scheduler.preemption import (
    Reclaimer,
    guaranteed,
    reclaim_due,
    within_some_guarantee,
)
from gpupool.scheduler.queues import Candidate, Queues, Tail
from gpupool.scheduler.reasons import (
    behind_host_text,
    behind_text,
    beyond_guarantee_text,
    no_fit_reason,
    requeued_text,
    untried_text,
)
from gpupool.scheduler.reservations import Hold, expected_start, reservation_node
from gpupool.scheduler.types import (
    Admission,
    BorrowOrder,
    CycleStats,
    Decisions,
    PendingInfo,
    PendingInfos,
    Policy,
    Preemption,
    RunningWorkload,
    SchedulerConfig,
    Snapshot,
    pending_info,
)
from gpupool.scheduler.waits import Waits


def cycle(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    now: float,
    config: SchedulerConfig = SchedulerConfig(),
    cache: SchedulerCache | None = None,
) -> Decisions:
    """Decide which pending workloads to admit (and where), which running ones to preempt,
    and why the others wait. Never mutates its inputs; same inputs give the same decisions.

    `cache` (owned by the caller, one per scheduler; see gpupool.scheduler.cache) carries
    work over from the previous cycle; the decisions are the same with it and without it.

    The cyclic garbage collector is paused while the cycle runs (it allocates many small
    objects and would otherwise spend a third of the time scanning them); it is switched
    back on afterwards if it was on before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Cycle(snapshot, pending, now, config, cache).run()
    finally:
        if was_enabled:
            gc.enable()


class _Cycle(ReclaimSteps):
    def __init__(
        self,
        snapshot: Snapshot,
        pending: Sequence[Workload],
        now: float,
        config: SchedulerConfig,
        cache: SchedulerCache | None = None,
    ):
        self.snap = snapshot
        self.pending = pending
        self._any_guarantee: bool | None = None
        # without a cache from the caller, a fresh one serves this cycle alone: one code path,
        # and the same decisions (the property tests hold a kept cache to a fresh one)
        self.cache = cache = cache if cache is not None else SchedulerCache()
        self.now = now
        self.config = config
        self.policy = Policy(config.policy)
        self.quotas = self.policy is Policy.FAIR
        self.tree = snapshot.tenants
        nodes = tuple(snapshot.nodes)
        self.cap = cache.capacity(nodes, snapshot.running)
        self.hardware = cache.hardware(nodes)
        #: (reason, position, tenant position) -> PendingInfo, shared between cycles
        self.infos = cache.info_pool(len(pending))
        #: id(queue) -> (queue, _Tail): shared between cycles (queues are reused)
        self._tails: dict[int, tuple[list, Tail]] = cache.tails()
        self.usage = Usage(self.tree)
        self.effective = Usage(self.tree)  # without stopping work, plus reclaims promised
        held, staying = cache.held()
        for (t, u), milli in held.items():
            self.usage.add(t, u, milli)
        for (t, u), milli in staying.items():
            self.effective.add(t, u, milli)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.reasons: dict[str, str] = {}
        self.nofit: set[Shape] = set()
        self._reason_memo: dict[Shape, str] = {}
        #: memos of failures, valid for the rest of the cycle (see _walk_tenants)
        #: tenant -> {shape: why} for placements that failed
        self._failed_shape: dict[str, dict[Shape, str]] = {}
        #: tenant -> shapes whose memoized failure was work within a guarantee that had not
        #: waited `reclaim_after_s`: work of that shape that has waited may still reclaim
        self._not_due: dict[str, set[Shape]] = {}
        self._epoch = 0
        self._tenant_fail: dict[str, tuple[int, str]] = {}
        #: tenant -> {user: (smallest milli refused, why)}
        self._user_fail: dict[str, dict[str, tuple[int, str]]] = {}
        self.holds: dict[int, Hold] = {}
        #: waits that end at a known time or event, per workload; they extend the plain
        #: reason at the end of the cycle (never memoized: they are per workload)
        self.waits = Waits(self.cap)
        self.reserved_by_tenant: set[str] = set()
        #: nodes held for blocked multi-node requests (gpupool.scheduler.gangwalk)
        self.gang_holds: list[GangHold] = []
        #: (fair) ids of the gangs that may hold nodes this cycle (gangwalk.may_hold)
        self.gang_turn: frozenset[str] | None = None
        #: tenants with blocked work that did not reclaim: no reclaim for work behind it
        self.no_reclaim: set[str] = set()
        #: workload id -> node index kept for it this cycle (Snapshot.nominated), and their
        #: tenants (whose placement failures are not memoized: a nominee may still fit)
        self.nominated_node: dict[str, int] = {}
        self.nominee_tenants: set[str] = set()
        self.stopped_tenants: dict[str, str] = {}  # tenant -> its blocked head (no backfill)
        self.considered = 0
        self._reclaimer: Reclaimer | None = None
        self._levels: LevelPreemptor | None = None
        #: ids of the victims chosen this cycle, shared by the Reclaimer and LevelPreemptor
        self._victims: set[str] = set()
        self._with_runtime: dict[int, list[RunningWorkload]] | None = None
        queues = Queues(snapshot, self.policy, self.hardware, cache, config)
        queues.classify(pending)
        self.unschedulable: dict[str, str] = queues.unschedulable
        self.queues: dict[str, list[Candidate]] = queues.queues
        self.pending_demand: dict[str, int] = queues.pending_demand
        demand = {t: float(self.usage.of(t)) for t in self.tree.leaves()}
        for t, milli in self.pending_demand.items():
            demand[t] = demand.get(t, 0.0) + milli
        self.fair = fair_shares(self.tree, self.cap.total_gpu_milli(), demand)

    # -- 1. classify -----------------------------------------------------------------------

    def run(self) -> Decisions:
        if self.policy is Policy.FIFO:
            first = {t: q[0][0] for t, q in self.queues.items()}
            order = sorted(first, key=lambda t: (first[t], t))
        else:
            order = sorted(self.queues, key=self._tenant_key)
        #: tenant -> its place in this cycle's order (at the start of the cycle), 1-based
        self.rank = {t: i + 1 for i, t in enumerate(order)}
        #: tenant -> how many of its queue were walked / how many of those still wait
        self.walked = dict.fromkeys(self.queues, 0)
        self.waiting = dict.fromkeys(self.queues, 0)
        self.info = PendingInfos()
        if self.policy is Policy.FIFO:
            self._walk_fifo()
        else:
            if self.quotas and self.snap.nominated:
                self._hold_nominated()
            self._walk_tenants()
        return self._decisions()

    def _hold_nominated(self) -> None:
        """Keep each nominated node (Snapshot.nominated) for its pending workload while that
        workload still fits within its guarantee: nobody else is placed there this cycle; the
        nominee itself may be (see `_place_or_block`)."""
        # with service levels and checkpointing work running, a nominee may be a level
        # preemption's (within its tenant, beyond any guarantee): held too
        levels = bool(self.config.service_levels_s and self.cache.checkpointing())
        ids = self.cap.node_ids
        for q in self.queues.values():
            for _, w, shape, milli in q:
                names = self.snap.nominated.get(w.id)
                nodes = [n for n in map(ids.get, names or ()) if n is not None]
                if not nodes:
                    continue
                if not levels and not within_some_guarantee(
                    self.tree, self.effective, w.tenant, milli
                ):
                    continue
                self.nominee_tenants.add(w.tenant)
                if shape.nodes > 1:  # a gang: all its nodes (gpupool.scheduler.gangwalk)
                    one = per_node(shape)
                    for n in nodes:
                        if n not in self.holds:
                            self._hold(n, Hold(w.tenant, w.id, one))
                    continue
                n = nodes[0]
                self.nominated_node[w.id] = n
                if n not in self.holds:
                    self._hold(n, Hold(w.tenant, w.id, shape))

    def _info(self, why: str, position: int, tenant_position: int) -> PendingInfo:
        """The PendingInfo; immutable, so equal ones are shared through the cache's pool."""
        k = (why, position, tenant_position)
        pi = self.infos.get(k)
        if pi is None:
            pi = self.infos[k] = pending_info(why, position, tenant_position)
        return pi

    def _cap_reached(self) -> bool:
        m = self.config.max_admissions_per_cycle
        return m is not None and len(self.admissions) >= m

    def _tenant_key(self, t: str) -> tuple:
        if self.policy is Policy.LAS:
            return las_tenant_key(self.snap.attained_service.get(t, 0.0), self.usage.of(t), t)
        q = self.tree.get(t).quota if t in self.tree else None
        g = q.guaranteed_milli if q is not None else 0
        service = None
        if self.config.borrow_order is BorrowOrder.SERVICE:
            weight = q.weight if q is not None else 1.0
            service = self.snap.attained_service.get(t, 0.0) / weight
        return fair_tenant_key(self.usage.of(t), self.fair.get(t, 0.0), g, t, service)

    def _walk_fifo(self) -> None:
        """One global queue in submit order, greedy: what does not fit is skipped."""
        merged = sorted(c for q in self.queues.values() for c in q)
        walked, waiting, put, rank = self.walked, self.waiting, self.info.put, self.rank
        cap = self.config.max_admissions_per_cycle
        for _, w, shape, _ in merged:
            if cap is not None and len(self.admissions) >= cap:
                break
            t = w.tenant
            walked[t] += 1
            if shape in self.nofit and not self.gang_holds:
                why = self._blocked_reason(shape)
            elif self._place_or_block(w, shape, reserve=False):
                continue
            else:
                why = self.reasons[w.id]
            n = waiting[t] = waiting[t] + 1
            put(w.id, self._info(why, n, rank[t]))
        self.considered = sum(walked.values())

    def _walk_tenants(self) -> None:
        """Tenants from a heap (re-ranked after each admission); inside a tenant, its queue
        in order until one is admitted. A failure does not change the tenant's key, so the
        same tenant goes on without touching the heap."""
        heap = [(self._tenant_key(t), t) for t in self.queues]
        heapq.heapify(heap)
        walked, waiting, put = self.walked, self.waiting, self.info.put
        reasons = self.reasons
        consider = self._consider
        while heap and not self._cap_reached():
            _, t = heapq.heappop(heap)
            q = self.queues[t]
            i = start = walked[t]
            n = waiting[t]
            r = self.rank[t]
            end = len(q)
            tfail = self._tenant_fail.get(t)
            ufail = self._user_fail.setdefault(t, {})
            failed_shape = self._failed_shape.setdefault(t, {})
            try_tail = True
            while i < end:
                if try_tail:
                    # the rest of the queue may all be answered from the memos: at once
                    try_tail = False
                    if not ufail and (tfail is not None or failed_shape) and t not in self._not_due:
                        filled = self._fill_tail(q, i, n, r, tfail, failed_shape)
                        if filled is not None:
                            n = filled
                            i = end
                            break
                if tfail is not None or ufail or failed_shape:
                    # fast path: the entries that already failed this cycle fail again (usage
                    # only grows and capacity only shrinks within a cycle), up to the first
                    # that needs a look: their reasons as one run
                    j, whys = self._memo_run(q, i, tfail, ufail, failed_shape, t)
                    if j > i:
                        self.info.add_run(q, i, whys, n + 1, r, stop=j)
                        n += j - i
                        i = j
                        if i == end:
                            break
                _, w, shape, _ = q[i]
                i += 1
                if consider(w, shape):
                    break  # admitted: re-rank the tenant
                why = reasons[w.id]
                tfail = self._tenant_fail.get(t)
                try_tail = True
                n += 1
                if t in self.stopped_tenants:
                    put(w.id, pending_info(why, n, r))
                    break
                put(w.id, self._info(why, n, r))
            self.considered += i - start
            walked[t] = i
            waiting[t] = n
            if i < end and t not in self.stopped_tenants:
                heapq.heappush(heap, (self._tenant_key(t), t))

    def _memo_run(
        self,
        q: list[Candidate],
        i: int,
        tfail: tuple[int, str] | None,
        ufail: dict[str, tuple[int, str]],
        failed_shape: dict[Shape, str],
        t: str,
    ) -> tuple[int, list[str]]:
        """From `q[i]` on, the entries that fail from the memos alone (tenant `t` at its limit
        for their size, their user at a cap for it, or their shape failed already, but for
        work that may reclaim now where the failure was work not yet due): (the index of the
        first that does not, their reasons in order)."""
        whys: list[str] = []
        add = whys.append
        t_milli, t_why = tfail if tfail is not None else (0, "")
        user = ufail.get
        shaped = failed_shape.get
        not_due = self._not_due.get(t)
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
                        not_due
                        and shape in not_due
                        and reclaim_due(w, self.now, self.config.reclaim_after_s)
                    ):
                        break  # it failed for work not yet due; this one is
                    add(why)
            i += 1
        return i, whys

    def _fill_tail(
        self,
        q: list[Candidate],
        i: int,
        n: int,
        r: int,
        tfail: tuple[int, str] | None,
        failed_shape: dict[Shape, str],
    ) -> int | None:
        """If every candidate from `q[i]` on fails from the memos alone (the tenant's limit
        refuses them all, or each one's shape already failed) and no user cap was hit, give
        them their PendingInfo at once, as the walk one by one would, and return the last
        position; else None (nothing done)."""
        tail = self._tails.get(id(q))
        if tail is None or tail[0] is not q:
            tail = self._tails[id(q)] = (q, Tail(q))
        tl = tail[1]
        why: str | dict[Shape, str]
        if tfail is not None:
            if tl.min_milli[i] < tfail[0]:
                return None
            why = tfail[1]
        else:
            if not all(map(failed_shape.__contains__, tl.shapes_from(i))):
                return None
            why = dict(failed_shape)  # a snapshot: holds clear the memo in place
        # built when the decisions are read (gpupool.scheduler.types.PendingInfos): a tail's
        # reasons carry live numbers ("960 GPUs in use") and positions, so they seldom repeat
        m = len(q) - i
        self.info.add_run(q, i, why, n + 1, r)
        return n + m

    def _consider(self, w: Workload, shape: Shape) -> bool:
        """Limits -> placement -> admit, or reclaim / reserve. True if admitted.

        A (tenant, user, shape) that failed stays failed for the rest of the cycle (usage
        only grows and capacity only shrinks), until a hold or a reclaim clears the memo."""
        milli = shape.gpu_milli
        if self.quotas:
            hit = limit_check(self.usage, w.tenant, w.owner, milli)
            if hit is not None:
                scope, why = hit.scope, hit.why
                self.reasons[w.id] = why
                if scope == TENANT and self._reclaim_under_limit(w, milli, hit.tenant):
                    return False
                if scope == TENANT:
                    old = self._tenant_fail.get(w.tenant)
                    if old is None or milli < old[0]:
                        self._tenant_fail[w.tenant] = (milli, why)
                else:
                    users = self._user_fail.setdefault(w.tenant, {})
                    old = users.get(w.owner)
                    if old is None or milli < old[0]:
                        users[w.owner] = (milli, why)
                return False
        reserve = self.policy is Policy.FAIR
        epoch = self._epoch
        if self._place_or_block(w, shape, reserve):
            return True
        if self._epoch == epoch and w.tenant not in self.nominee_tenants and not self.gang_holds:
            # placement failures do not depend on the user
            self._failed_shape.setdefault(w.tenant, {})[shape] = self.reasons[w.id]
            if reserve and self._reclaims_later(w, shape):
                self._not_due.setdefault(w.tenant, set()).add(shape)
        return False

    def _reclaims_later(self, w: Workload, shape: Shape) -> bool:
        """True if `w` is within a guarantee but has not waited `reclaim_after_s`: its
        failure says nothing about same-shaped work of its tenant that has."""
        return (
            self.config.preemption
            and not reclaim_due(w, self.now, self.config.reclaim_after_s)
            and within_some_guarantee(self.tree, self.effective, w.tenant, shape.gpu_milli)
        )

    def _place_or_block(self, w: Workload, shape: Shape, reserve: bool) -> bool:
        if shape.nodes > 1:
            return place_gang(self, w, shape)
        nominated = self.nominated_node.get(w.id) if self.nominated_node else None
        if nominated is not None:
            p = place_on_node(self.cap, nominated, shape)  # its own hold does not stop it
            if p is not None:
                self._admit(w, shape, p)
                return True
        if shape not in self.nofit:
            p = find_placement(self.cap, shape)
            if p is not None:
                self._admit(w, shape, p)
                return True
            self.nofit.add(shape)
        if self.gang_holds:
            p = backfill_gang_nodes(self, w, shape)
            if p is not None:
                self._admit(w, shape, p)
                return True
        if not reserve:
            self.reasons[w.id] = self._blocked_reason(shape)
            return False
        within = within_some_guarantee(self.tree, self.effective, w.tenant, shape.gpu_milli)
        # Reclaim goes in queue order: once work of a tenant within its guarantee neither
        # fits nor reclaims, the work behind it only backfills free capacity (what it
        # reclaimed would go to the blocked work ahead of it as soon as that fits, and be
        # reclaimed again). Work too big for what is left of the guarantee has no claim, and
        # work that has not waited `reclaim_after_s` does not reclaim yet: neither stops the
        # work behind it (what that reclaims is held for it: its node is nominated).
        may_reclaim = within and self.config.preemption and w.tenant not in self.no_reclaim
        if may_reclaim and self._reclaim(w, shape):
            return False
        # A tenant below its guarantee grows by reclaiming; only where it cannot (the work is
        # beyond its guarantee, or nothing borrowed can be taken back now) does it make room
        # by stopping its own work at a higher service level, which leaves its usage as is.
        if (
            self.config.service_levels_s
            and self.config.preemption
            and not (may_reclaim and self._reclaim_pending(w))
            and self._level_preempt(w, shape)
        ):
            return False
        if within and reclaim_due(w, self.now, self.config.reclaim_after_s):
            self.no_reclaim.add(w.tenant)
        why = self._blocked_reason(shape)
        if not within and shape.gpu_milli and self._reclaims_happen():  # why no reclaim time
            t = w.tenant
            g = guaranteed(self.tree, t)
            why += beyond_guarantee_text(t, g, self.effective.of(t), shape.gpu_milli)
        self.reasons[w.id] = why
        # Guaranteed work that still does not fit reserves a node (one per tenant and cycle);
        # work that would borrow reserves nothing: it waits for capacity to free up, and
        # smaller work may use any free capacity meanwhile (see docs/scheduler.md).
        if within and w.tenant not in self.reserved_by_tenant:
            self.reserved_by_tenant.add(w.tenant)
            n = reservation_node(self.cap, shape)
            if n is not None:
                self._hold(n, Hold(w.tenant, w.id, shape))
                at = expected_start(self.cap, n, shape, self._running_on(n))
                self.waits.reserved(w, n, at)
        if not self.config.backfill:
            self.stopped_tenants[w.tenant] = w.id
        return False

    def _reclaims_happen(self) -> bool:
        """True if work within a guarantee may reclaim GPUs here (preemption on, some tenant
        guaranteed GPUs): then work beyond its guarantee is told why it never reclaims."""
        if self._any_guarantee is None:
            self._any_guarantee = self.config.preemption and any(
                t.quota.guaranteed_milli > 0 for t in self.tree
            )
        return self._any_guarantee

    def _admit(self, w: Workload, shape: Shape, p: Placement) -> None:
        alloc = to_allocation(self.cap, w.id, p, shape, self.now, self.config.shared_enforcement)
        self.cap.assume(p.node, list(p.takes), shape.cpu_milli, shape.memory_mib)
        self.cap.note_admission(w.id, alloc)
        self.usage.add(w.tenant, w.owner, shape.gpu_milli)
        self.effective.add(w.tenant, w.owner, shape.gpu_milli)
        self.admissions.append(Admission(w.id, alloc))

    def _hold(self, n: int, hold: Hold) -> None:
        self.holds[n] = hold
        self._changed()
        self.cap.hold(n, hold.cpu_milli, hold.memory_mib)

    def _running_on(self, n: int) -> list[RunningWorkload]:
        """The running work on node `n` that has a max runtime (indexed once per cycle)."""
        if self._with_runtime is None:
            ids = self.cap.node_ids
            by_node: dict[int, list[RunningWorkload]] = {}
            for rw in self.cache.limited().values():
                for name in rw.allocation.nodes:  # a multi-node allocation: each of its nodes
                    m = ids.get(name)
                    if m is not None:
                        by_node.setdefault(m, []).append(rw)
            self._with_runtime = by_node
        return self._with_runtime.get(n, [])

    def _changed(self) -> None:
        """Holds or reclaims changed what later candidates see: drop the failure memos."""
        self._epoch += 1
        for memo in self._failed_shape.values():
            memo.clear()
        self._not_due.clear()
        self._reason_memo.clear()

    def _blocked_reason(self, shape: Shape) -> str:
        """Memoized per shape until the next hold (capacity only shrinks within a cycle)."""
        r = self._reason_memo.get(shape)
        if r is None:
            r = self._reason_memo[shape] = self._compute_blocked_reason(shape)
        return r

    def _compute_blocked_reason(self, shape: Shape) -> str:
        if shape.nodes > 1:
            return gang_reason(self.cap, shape)
        for n in sorted(self.holds):
            if place_on_node(self.cap, n, shape) is not None:
                h = self.holds[n]
                if shape.kind == CPU_ONLY:  # it fits, but not beside what the holder needs
                    return behind_host_text(h.tenant, h.workload_id, self.cap.nodes[n].name)
                return behind_text(h.tenant, h.workload_id)
        return no_fit_reason(self.cap, shape)

    # -- 5. decisions ----------------------------------------------------------------------

    def _say_requeued(self, info: PendingInfos) -> None:
        """Work requeued after a preemption kept its submit time, so it may stand ahead of
        work that has waited longer in the queue: its reason says so."""
        for w in self.pending:
            if w.preemptions:
                info.add_to_reason(w.id, requeued_text(w.submitted_at))

    def _decisions(self) -> Decisions:
        """Reasons for what was never walked (admission cap, a blocked head without
        backfill), then the decisions."""
        capped = self._cap_reached()
        info = self.info
        for t, q in self.queues.items():
            i = self.walked[t]
            if i == len(q):
                continue
            n = self.waiting[t]
            r = self.rank[t]
            why = untried_text(
                t,
                self.config.max_admissions_per_cycle if capped else None,
                self.stopped_tenants.get(t),
            )
            info.add_run(q, i, why, n + 1, r)
        self.waits.apply(info)
        self._say_requeued(info)
        return Decisions(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            pending=info,
            unschedulable=self.unschedulable,
            fair_shares={t: int(round(v)) for t, v in sorted(self.fair.items())},
            stats=CycleStats(self.considered, len(self.admissions), len(self.preemptions)),
        )
