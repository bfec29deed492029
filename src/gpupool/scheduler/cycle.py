"""One scheduling cycle: snapshot + pending -> decisions. Pure and deterministic.

`_Cycle.run` lists the steps, numbered as in docs/scheduler.md ("One cycle"); what they share
is in gpupool.scheduler.cyclestate (read-only `CycleInputs`, the `CycleState` they change and
its `FailureMemo`). Steps 4-6 for one candidate are in `_consider` and `_place_or_block`; the
reclaim steps are functions in gpupool.scheduler.cycle_reclaim, the gang steps in
gpupool.scheduler.gangwalk and gangreclaim, moves in gpupool.scheduler.defrag.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Sequence

from gpupool.domain import Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.cycle_reclaim import (
    Preemptors,
    level_preempt,
    reclaim,
    reclaim_pending,
    reclaim_under_limit,
)
from gpupool.scheduler.cyclestate import CycleInputs, CycleState, memo_run, shape_run
from gpupool.scheduler.fairshare import fair_shares
from gpupool.scheduler.gangs import per_node
from gpupool.scheduler.gangwalk import GangTurn, backfill_gang_nodes, place_gang
from gpupool.scheduler.levels import effective_config, with_sibling_levels
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
    guaranteed,
    reclaim_due,
    within_some_guarantee,
)
from gpupool.scheduler.queues import Candidate, Queues
from gpupool.scheduler.reasons import (
    beyond_guarantee_text,
    requeued_text,
    untried_text,
)
from gpupool.scheduler.reservations import Hold, expected_start, reservation_node
from gpupool.scheduler.tails import Tail
from gpupool.scheduler.types import (
    BorrowOrder,
    CycleStats,
    Decisions,
    PendingInfo,
    PendingInfos,
    Policy,
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
        config = effective_config(config, snapshot)  # relative service levels (levels.py)
        return _Cycle(snapshot, pending, now, config, cache).run()
    finally:
        if was_enabled:
            gc.enable()


class _Cycle:
    """One cycle's walk over the queues; `run` is its list of steps."""

    def __init__(
        self,
        snapshot: Snapshot,
        pending: Sequence[Workload],
        now: float,
        config: SchedulerConfig,
        cache: SchedulerCache | None = None,
    ):
        self.pending = pending
        # without a cache from the caller, a fresh one serves this cycle alone: one code path,
        # and the same decisions (the property tests hold a kept cache to a fresh one)
        self.cache = cache = cache if cache is not None else SchedulerCache()
        policy = Policy(config.policy)
        tree = snapshot.tenants
        nodes = tuple(snapshot.nodes)
        cap = cache.capacity(nodes, snapshot.running)
        if cache.checkpointing():
            # waiting checkpointing work takes its siblings' service level (levels.py)
            snapshot = with_sibling_levels(snapshot, pending, now, config)
        self.ins = ins = CycleInputs(
            snapshot, now, config, policy, tree, cache, quotas=policy is Policy.FAIR
        )
        self.hardware = cache.hardware(nodes)
        #: (reason, position, tenant position) -> PendingInfo, shared between cycles
        self.infos = cache.info_pool(len(pending))
        #: tenant -> (its queue, Tail): shared between cycles (queues are reused)
        self._tails: dict[str, tuple[list, Tail]] = cache.tails()
        usage = Usage(tree)
        effective = Usage(tree)  # without stopping work, plus reclaims promised
        held, staying = cache.held()
        for (t, u), milli in held.items():
            usage.add(t, u, milli)
        for (t, u), milli in staying.items():
            effective.add(t, u, milli)
        #: what the steps change (gpupool.scheduler.cyclestate), its memo of failures, and
        #: the victim finders the reclaim steps share
        self.st = st = CycleState(cap, usage, effective, Waits(cap))
        self.memo = st.memo
        self.pre = Preemptors(ins, st)
        self._any_guarantee: bool | None = None
        self.reserved_by_tenant: set[str] = set()
        #: workload id -> node index kept for it this cycle (Snapshot.nominated), and their
        #: tenants (whose placement failures are not memoized: a nominee may still fit)
        self.nominated_node: dict[str, int] = {}
        self.nominee_tenants: set[str] = set()
        self.considered = 0
        #: tenant -> `_tenant_key_parts`, looked up once per cycle
        self._key_parts: dict[str, tuple[float, float, int, float | None]] = {}

    def run(self) -> Decisions:
        """The steps of a cycle, in order (numbered as in docs/scheduler.md)."""
        self._classify()  # 1.
        self._fair_shares()  # 2.
        self._order()  # 3.
        if self.ins.quotas and self.ins.snap.nominated:
            self._hold_nominated()  # 5. (what earlier reclaims freed is kept for its nominee)
        if self.ins.policy is Policy.FIFO:
            self._walk_fifo()  # 4.-6. per candidate: `_consider`
        else:
            self._walk_tenants()  # 4.-6. per candidate: `_consider`
        return self._decisions()  # 7.

    def _classify(self) -> None:
        """1. Pending work -> unschedulable (with reasons) and per-tenant queues."""
        ins = self.ins
        queues = Queues(ins.snap, ins.policy, self.hardware, self.cache, ins.config)
        queues.classify(self.pending)
        self.unschedulable: dict[str, str] = queues.unschedulable
        self.queues: dict[str, list[Candidate]] = queues.queues
        self.pending_demand: dict[str, int] = queues.pending_demand
        self.last_keys = queues.last_keys
        #: (fair) ids of the gangs that may hold nodes this cycle (gangwalk.may_hold)
        self.gang_turn = GangTurn(self.queues, ins.config.gang_reservations)

    def _fair_shares(self) -> None:
        """2. Fair shares by water-filling over held plus pending demand."""
        usage, tree = self.st.usage, self.ins.tree
        demand = {t: float(usage.of(t)) for t in tree.leaves()}
        for t, milli in self.pending_demand.items():
            demand[t] = demand.get(t, 0.0) + milli
        self.fair = fair_shares(tree, self.st.cap.total_gpu_milli(), demand)

    def _order(self) -> None:
        """3. The tenants in policy order: their rank, and walk counters at zero."""
        if self.ins.policy is Policy.FIFO:
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

    def _hold_nominated(self) -> None:
        """Keep each nominated node (Snapshot.nominated) for its pending workload while that
        workload still fits within its guarantee: nobody else is placed there this cycle; the
        nominee itself may be (see `_place_or_block`)."""
        ins, st = self.ins, self.st
        # with service levels and checkpointing work running, a nominee may be a level
        # preemption's (within its tenant, beyond any guarantee): held too
        levels = bool(ins.config.service_levels_s and self.cache.checkpointing())
        ids = st.cap.node_ids
        for q in self.queues.values():
            for _, w, shape, milli in q:
                names = ins.snap.nominated.get(w.id)
                nodes = [n for n in map(ids.get, names or ()) if n is not None]
                if not nodes:
                    continue
                if not levels and not within_some_guarantee(
                    ins.tree, st.effective, w.tenant, milli
                ):
                    continue
                self.nominee_tenants.add(w.tenant)
                if shape.nodes > 1:  # a gang: all its nodes (gpupool.scheduler.gangwalk)
                    one = per_node(shape)
                    for n in nodes:
                        if n not in st.holds:
                            st.hold(n, Hold(w.tenant, w.id, one))
                    continue
                n = nodes[0]
                self.nominated_node[w.id] = n
                if n not in st.holds:
                    st.hold(n, Hold(w.tenant, w.id, shape))

    def _info(self, why: str, position: int, tenant_position: int) -> PendingInfo:
        """The PendingInfo; immutable, so equal ones are shared through the cache's pool."""
        k = (why, position, tenant_position)
        pi = self.infos.get(k)
        if pi is None:
            pi = self.infos[k] = pending_info(why, position, tenant_position)
        return pi

    def _cap_reached(self) -> bool:
        m = self.ins.config.max_admissions_per_cycle
        return m is not None and len(self.st.admissions) >= m

    def _tenant_key(self, t: str) -> tuple:
        """Tenant `t`'s place in the walk's order now (only its usage changes in a cycle: the
        rest is looked up once, `_key_parts`)."""
        parts = self._key_parts.get(t)
        if parts is None:
            parts = self._key_parts[t] = self._tenant_key_parts(t)
        attained, fair, g, service = parts
        if self.ins.policy is Policy.LAS:
            return las_tenant_key(attained, self.st.usage.of(t), t)
        return fair_tenant_key(self.st.usage.of(t), fair, g, t, service)

    def _tenant_key_parts(self, t: str) -> tuple[float, float, int, float | None]:
        """(attained service, fair share, guaranteed milli, service per weight or None) of
        tenant `t`: what its key reads besides its usage, the same all cycle."""
        ins = self.ins
        attained = ins.snap.attained_service.get(t, 0.0)
        q = ins.tree.get(t).quota if t in ins.tree else None
        g = q.guaranteed_milli if q is not None else 0
        service = None
        if ins.config.borrow_order is BorrowOrder.SERVICE:
            service = attained / (q.weight if q is not None else 1.0)
        return attained, self.fair.get(t, 0.0), g, service

    def _walk_fifo(self) -> None:
        """4.-6. One global queue in submit order, greedy: what does not fit is skipped."""
        merged = sorted(c for q in self.queues.values() for c in q)
        walked, waiting, put, rank = self.walked, self.waiting, self.info.put, self.rank
        st = self.st
        nofit, admissions = self.memo.nofit, st.admissions
        cap = self.ins.config.max_admissions_per_cycle
        for _, w, shape, _ in merged:
            if cap is not None and len(admissions) >= cap:
                break
            t = w.tenant
            walked[t] += 1
            if shape in nofit and not st.gang_holds:
                why = st.blocked_reason(shape)
            elif self._place_or_block(w, shape, reserve=False):
                continue
            else:
                why = st.reasons[w.id]
            n = waiting[t] = waiting[t] + 1
            put(w.id, self._info(why, n, rank[t]))
        self.considered = sum(walked.values())

    def _walk_tenants(self) -> None:
        """4.-6. Tenants from a heap (re-ranked after each admission); inside a tenant, its
        queue in order until one is admitted. A failure does not change the tenant's key, so
        the same tenant goes on without touching the heap. Keys are unique (they end with the
        tenant), so the order of the walk does not depend on the heap's layout."""
        heap = [(self._tenant_key(t), t) for t in self.queues]
        heapq.heapify(heap)
        walked, waiting, put = self.walked, self.waiting, self.info.put
        reasons = self.st.reasons
        stopped = self.st.stopped
        memo = self.memo
        consider = self._consider
        queues, rank, admissions = self.queues, self.rank, self.st.admissions
        most = self.ins.config.max_admissions_per_cycle  # = `_cap_reached`, read once
        first = heapq.heappop(heap) if heap else None
        while first is not None and (most is None or len(admissions) < most):
            t = first[1]
            q = queues[t]
            i = start = walked[t]
            n = waiting[t]
            r = rank[t]
            end = len(q)
            tfail = memo.tenant_fail.get(t)
            ufail = memo.user_fail.setdefault(t, {})
            failed_shape = memo.failed_shape.setdefault(t, {})
            try_tail = True
            while i < end:
                if try_tail:
                    # the rest of the queue may all be answered from the memos: at once (only
                    # if its first entry is: `_fill_tail` checks the rest)
                    try_tail = False
                    c = q[i]
                    if (
                        not ufail
                        and (c[3] >= tfail[0] if tfail is not None else c[2] in failed_shape)
                        and t not in memo.not_due
                    ):
                        filled = self._fill_tail(t, q, i, n, r, tfail, failed_shape)
                        if filled is not None:
                            n = filled
                            i = end
                            break
                c = q[i]
                if (
                    (tfail is not None and c[3] >= tfail[0])
                    or (ufail and c[1].owner in ufail)
                    or c[2] in failed_shape
                ):
                    # fast path: the entries that already failed this cycle fail again (usage
                    # only grows and capacity only shrinks within a cycle), up to the first
                    # that needs a look: their reasons as one run (tried only where the next
                    # entry may be one of them)
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
                tfail = memo.tenant_fail.get(t)
                try_tail = True
                n += 1
                if t in stopped:
                    put(w.id, pending_info(why, n, r))
                    break
                put(w.id, self._info(why, n, r))
            self.considered += i - start
            walked[t] = i
            waiting[t] = n
            if i < end and t not in stopped:
                # = heappush, then heappop: the tenant re-ranked, then the first one now (the
                # same tenant at once, without a change to the heap, where its key is still
                # the least)
                first = heapq.heappushpop(heap, (self._tenant_key(t), t))
            else:
                first = heapq.heappop(heap) if heap else None

    def _memo_run(
        self,
        q: list[Candidate],
        i: int,
        tfail: tuple[int, str] | None,
        ufail: dict[str, tuple[int, str]],
        failed_shape: dict[Shape, str],
        t: str,
    ) -> tuple[int, list[str]]:
        """`memo_run` for tenant `t` now (`shape_run` where only shapes failed: the same)."""
        not_due = self.memo.not_due.get(t)
        if tfail is None and not ufail and not not_due:
            return shape_run(q, i, failed_shape)
        ins = self.ins
        return memo_run(
            q, i, tfail, ufail, failed_shape, not_due, ins.now, ins.config.reclaim_after_s
        )

    def _fill_tail(
        self,
        t: str,
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
        tail = self._tails.get(t)
        if tail is None or tail[0] is not q:
            tail = self._tails[t] = (q, Tail(q, self.last_keys.get(t)))
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
        """4.-6. for one candidate: limits -> placement -> admit, or reclaim / reserve. True
        if admitted.

        A (tenant, user, shape) that failed stays failed for the rest of the cycle (usage
        only grows and capacity only shrinks), until a hold or a reclaim clears the memo."""
        st, memo = self.st, self.memo
        milli = shape.gpu_milli
        if self.ins.quotas:
            # 4. limits (5. under an ancestor's limit: reclaim inside it)
            hit = limit_check(st.usage, w.tenant, w.owner, milli)
            if hit is not None:
                scope, why = hit.scope, hit.why
                st.reasons[w.id] = why
                if scope == TENANT and reclaim_under_limit(
                    self.ins, st, self.pre, w, milli, hit.tenant
                ):
                    return False
                if scope == TENANT:
                    old = memo.tenant_fail.get(w.tenant)
                    if old is None or milli < old[0]:
                        memo.tenant_fail[w.tenant] = (milli, why)
                else:
                    users = memo.user_fail.setdefault(w.tenant, {})
                    old = users.get(w.owner)
                    if old is None or milli < old[0]:
                        users[w.owner] = (milli, why)
                return False
        reserve = self.ins.policy is Policy.FAIR
        epoch = memo.epoch
        if self._place_or_block(w, shape, reserve):
            return True
        if memo.epoch == epoch and w.tenant not in self.nominee_tenants and not st.gang_holds:
            # placement failures do not depend on the user
            memo.failed_shape.setdefault(w.tenant, {})[shape] = st.reasons[w.id]
            if reserve and self._reclaims_later(w, shape):
                memo.not_due.setdefault(w.tenant, set()).add(shape)
        return False

    def _reclaims_later(self, w: Workload, shape: Shape) -> bool:
        """True if `w` is within a guarantee but has not waited `reclaim_after_s`: its
        failure says nothing about same-shaped work of its tenant that has."""
        ins = self.ins
        return (
            ins.config.preemption
            and not reclaim_due(w, ins.now, ins.config.reclaim_after_s)
            and within_some_guarantee(ins.tree, self.st.effective, w.tenant, shape.gpu_milli)
        )

    def _place_or_block(self, w: Workload, shape: Shape, reserve: bool) -> bool:
        """4. placement (a gang: gangwalk), else 5. reclaim or a level preemption, else
        6. reserve a node; True if admitted."""
        ins, st = self.ins, self.st
        if shape.nodes > 1:
            return place_gang(ins, st, self.pre, self.gang_turn, w, shape)
        nominated = self.nominated_node.get(w.id) if self.nominated_node else None
        if nominated is not None:
            p = place_on_node(st.cap, nominated, shape)  # its own hold does not stop it
            if p is not None:
                self._admit(w, shape, p)
                return True
        nofit = self.memo.nofit
        if shape not in nofit:
            p = find_placement(st.cap, shape)
            if p is not None:
                self._admit(w, shape, p)
                return True
            nofit.add(shape)
        if st.gang_holds:
            p = backfill_gang_nodes(ins, st, w, shape)
            if p is not None:
                self._admit(w, shape, p)
                return True
        if not reserve:
            st.reasons[w.id] = st.blocked_reason(shape)
            return False
        config, tree = ins.config, ins.tree
        within = within_some_guarantee(tree, st.effective, w.tenant, shape.gpu_milli)
        # Reclaim goes in queue order: once work of a tenant within its guarantee neither
        # fits nor reclaims, the work behind it only backfills free capacity (what it
        # reclaimed would go to the blocked work ahead of it as soon as that fits, and be
        # reclaimed again). Work too big for what is left of the guarantee has no claim, and
        # work that has not waited `reclaim_after_s` does not reclaim yet: neither stops the
        # work behind it (what that reclaims is held for it: its node is nominated).
        may_reclaim = within and config.preemption and w.tenant not in st.no_reclaim
        if may_reclaim and reclaim(ins, st, self.pre, w, shape):
            return False
        # A tenant below its guarantee grows by reclaiming; only where it cannot (the work is
        # beyond its guarantee, or nothing borrowed can be taken back now) does it make room
        # by stopping its own work at a higher service level, which leaves its usage as is.
        if (
            config.service_levels_s
            and config.preemption
            and not (may_reclaim and reclaim_pending(ins, st, w))
            and level_preempt(ins, st, self.pre, w, shape)
        ):
            return False
        if within and reclaim_due(w, ins.now, config.reclaim_after_s):
            st.no_reclaim.add(w.tenant)
        why = st.blocked_reason(shape)
        if not within and shape.gpu_milli and self._reclaims_happen():  # why no reclaim time
            t = w.tenant
            g = guaranteed(tree, t)
            why += beyond_guarantee_text(t, g, st.effective.of(t), shape.gpu_milli)
        st.reasons[w.id] = why
        # 6. Guaranteed work that still does not fit reserves a node (one per tenant and
        # cycle); work that would borrow reserves nothing: it waits for capacity to free up,
        # and smaller work may use any free capacity meanwhile (see docs/scheduler.md).
        if within and w.tenant not in self.reserved_by_tenant:
            self.reserved_by_tenant.add(w.tenant)
            cap = st.cap
            n = reservation_node(cap, shape)
            if n is not None:
                st.hold(n, Hold(w.tenant, w.id, shape))
                at = expected_start(cap, n, shape, ins.running_on(cap, n))
                st.waits.reserved(w, n, at)
        if not config.backfill:
            st.stopped[w.tenant] = w.id
        return False

    def _reclaims_happen(self) -> bool:
        """True if work within a guarantee may reclaim GPUs here (preemption on, some tenant
        guaranteed GPUs): then work beyond its guarantee is told why it never reclaims."""
        if self._any_guarantee is None:
            self._any_guarantee = self.ins.config.preemption and any(
                t.quota.guaranteed_milli > 0 for t in self.ins.tree
            )
        return self._any_guarantee

    def _admit(self, w: Workload, shape: Shape, p: Placement) -> None:
        """4. admit: assume the placement in the index at once, so later candidates see it."""
        st, ins = self.st, self.ins
        cap = st.cap
        alloc = to_allocation(cap, w.id, p, shape, ins.now, ins.config.shared_enforcement)
        cap.assume(p.node, list(p.takes), shape.cpu_milli, shape.memory_mib)
        cap.note_admission(w.id, alloc)
        st.admitted(w, shape.gpu_milli, alloc)

    # -- 7. decisions ----------------------------------------------------------------------

    def _say_requeued(self, info: PendingInfos) -> None:
        """Work requeued after a preemption kept its submit time, so it may stand ahead of
        work that has waited longer in the queue: its reason says so."""
        for w in self.pending:
            if w.preemptions:
                info.add_to_reason(w.id, requeued_text(w.submitted_at))

    def _decisions(self) -> Decisions:
        """7. Reasons for what was never walked (admission cap, a blocked head without
        backfill), the waits, then the decisions."""
        capped = self._cap_reached()
        info = self.info
        st = self.st
        for t, q in self.queues.items():
            i = self.walked[t]
            if i == len(q):
                continue
            n = self.waiting[t]
            r = self.rank[t]
            why = untried_text(
                t,
                self.ins.config.max_admissions_per_cycle if capped else None,
                st.stopped.get(t),
            )
            info.add_run(q, i, why, n + 1, r)
        st.waits.apply(info)
        self._say_requeued(info)
        return Decisions(
            admissions=tuple(st.admissions),
            preemptions=tuple(st.preemptions),
            pending=info,
            unschedulable=self.unschedulable,
            fair_shares={t: int(round(v)) for t, v in sorted(self.fair.items())},
            stats=CycleStats(self.considered, len(st.admissions), len(st.preemptions)),
        )
