"""Reclaim: a candidate within its tenant's guarantee that does not fit may preempt borrowed work.

Reclaim happens only for a candidate that has waited `reclaim_after_s` (a lasting shortfall,
not every newcomer: a shortfall that completions fill soon costs no preemption); before that,
with `reclaim_checkpointing_at_once`, only victims that declare `checkpointing` (stopping them
throws no progress away: `only_checkpointing`).

Rules (all must hold for a victim):
* it belongs to another tenant, and on the branch where the two tenants part (the children of
  their lowest common ancestor) the victim's branch is over its guarantee — that is, it holds
  borrowed capacity — while the candidate's branch stays within its own guarantee with the
  candidate added;
* it is preemptible, has run at least `min_runtime_s`, and is not already stopping;
* it does not cut into a per-GPU-model guarantee: a tenant (or ancestor) with a guarantee on
  the model the victim runs on keeps at least that much of the model;
* victims are taken on one node, lowest priority first, then least progress first (GPU-time
  since they started: what a restart loses), only until the candidate fits there; victims
  that turn out not to be needed are put back; the node whose victim set has the lowest top
  priority, then the least progress in all, then the fewest victims, wins. With
  `reclaim_checkpointing_by_service` (the default), `checkpointing` work, whose restart loses
  only its checkpoint, comes before other work of its priority, the most attained service
  first (with heavy-tailed run lengths, the work that has run longest is the likeliest to run
  longest still), and counts as the least progress in the node's sum.

Work that is already stopping counts as freed: if the candidate fits once it has stopped, no
new victim is chosen. Victims are returned; the candidate is admitted in a later cycle, once
the caller has stopped them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from gpupool.domain import TenantTree, Workload
from gpupool.scheduler.capacity import FRACTION, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.limits import Usage, gpus_text
from gpupool.scheduler.placement import Placement, place_on_node
from gpupool.scheduler.types import RunningWorkload

#: how many nodes where a candidate would fit are compared before victims are chosen
NODES_COMPARED = 4


@dataclass(frozen=True, slots=True)
class Reclaim:
    node: int
    victims: tuple[RunningWorkload, ...]
    #: stopping workloads on the node the candidate waits for
    stopping: int
    #: where the candidate will go once victims (and stopping work) are gone
    placement: Placement


def branches(tree: TenantTree, a: str, b: str) -> tuple[str, str]:
    """The ancestors of `a` and `b` just below their lowest common ancestor."""
    ca = tree.ancestors(a)[::-1] if a in tree else [a]
    cb = tree.ancestors(b)[::-1] if b in tree else [b]
    i = 0
    while i < len(ca) and i < len(cb) and ca[i] == cb[i]:
        i += 1
    return ca[min(i, len(ca) - 1)], cb[min(i, len(cb) - 1)]


def guaranteed(tree: TenantTree, tenant: str) -> int:
    return tree.get(tenant).quota.guaranteed_milli if tenant in tree else 0


def reclaim_due(w: Workload, now: float, reclaim_after_s: float) -> bool:
    """True once `w` has waited `reclaim_after_s` since it was submitted (requeued work keeps
    its submit time, so work that was itself preempted may reclaim at once)."""
    return now - w.submitted_at >= reclaim_after_s


def within_some_guarantee(tree: TenantTree, usage: Usage, tenant: str, milli: int) -> bool:
    """True if some tenant on `tenant`'s chain keeps within its guarantee with `milli` added."""
    for a in usage.chain(tenant):
        g = guaranteed(tree, a)
        if g > 0 and usage.of(a) + milli <= g:
            return True
    return False


def borrowing_branch(tree: TenantTree, usage: Usage, tenant: str) -> bool:
    """True if some branch another tenant's work could be reclaimed from holds borrowed
    capacity: a sibling of `tenant` or of one of its ancestors (or a tenant not in the tree)
    over its guarantee. When False, `Reclaimer.find` and `preview` find nothing for `tenant`,
    so a cycle need not build a Reclaimer (cheap: the chain and its siblings, no running work).
    """
    for a in usage.chain(tenant):
        parent = tree.get(a).parent if a in tree else None
        for s in tree.children(parent):
            if s != a and usage.of(s) > guaranteed(tree, s):
                return True
    return any(milli > 0 and t not in tree for t, milli in usage.tenant.items())


class Reclaimer:
    """Finds victims for candidates; one per cycle. `usage` excludes stopping work."""

    def __init__(
        self,
        cap: CapacityIndex,
        tree: TenantTree,
        usage: Usage,
        running: tuple[RunningWorkload, ...],
        now: float,
        min_runtime_s: float,
        most_service: Mapping[str, float] | None = None,
    ):
        self.cap = cap
        self.tree = tree
        #: (`reclaim_checkpointing_by_service`) attained service per workload id: then
        #: `checkpointing` victims go first, the most service first (`lost`)
        self.most_service = most_service
        self.usage = usage
        self.taken: set[str] = set()
        self.stopping: dict[int, list[RunningWorkload]] = {}
        self.victims: dict[int, list[RunningWorkload]] = {}
        #: workload id -> when it has run `min_runtime_s` (may be preempted from then on),
        #: for possible victims that have not yet (see `find(at=...)`)
        self.young: dict[str, float] = {}
        #: the time victims are chosen for (`now`, or later for a preview)
        self.at = now
        #: only victims that declare checkpointing count (see `only_checkpointing`)
        self.checkpointing_only = False
        self.now = now
        victims = self.victims
        young = self.young
        stopping = self.stopping
        node_ids = cap.node_ids
        # every possible victim once per node it is on, keyed (priority, lost, id) once: the
        # key is worked out here, not by each sort's comparisons (it sums the shares)
        keyed: list[tuple[int, float, str, int, int, RunningWorkload]] = []
        append = keyed.append
        for rw in running:
            al = rw.allocation
            shares = al.shares
            head = al.node
            w = rw.workload
            # the common case, in short (the same as below): not stopping, every share on the
            # head node (listed there only), milli summed in the same pass
            one = bool(shares) and not rw.stopping
            if one:
                if len(shares) == 1:
                    s0 = shares[0]
                    one = s0.node == head
                    milli = s0.milli
                else:
                    milli = 0
                    for s in shares:
                        if s.node != head:
                            one = False
                            break
                        milli += s.milli
            if one:
                if not w.preemptible:
                    continue
                n = node_ids.get(head)
                if n is None:
                    continue
                started = w.started_at if w.started_at is not None else al.since
                if now - started < min_runtime_s:
                    young[w.id] = started + min_runtime_s
                since = now - al.since
                if n not in victims:
                    victims[n] = []
                lost = since * milli if since > 0.0 else 0.0
                append((w.priority, lost, w.id, n, len(keyed), rw))
                continue
            # a gang is listed on each of its nodes; chosen on one, it stops as a whole (one
            # workload), though only its part on that node is counted as freed there
            if len(shares) == 1:
                s0 = shares[0]
                names: tuple[str, ...] = (head,) if s0.node == head else al.nodes
                milli = s0.milli
            else:
                names = al.nodes if al.multi_node else (head,)
                milli = al.gpu_milli
            if rw.stopping:
                for name in names:
                    n = node_ids.get(name)
                    if n is not None:
                        stopping.setdefault(n, []).append(rw)
                continue
            w = rw.workload
            if not w.preemptible:
                continue
            lost = -1.0
            for name in names:
                n = node_ids.get(name)
                if n is None:
                    continue
                if lost < 0.0:
                    started = w.started_at if w.started_at is not None else al.since
                    if now - started < min_runtime_s:
                        young[w.id] = started + min_runtime_s
                    lost = max(0.0, now - al.since) * milli
                if n not in victims:
                    victims[n] = []
                keyed.append((w.priority, lost, w.id, n, len(keyed), rw))
        if most_service is not None:
            keyed = [
                (e[0], self.lost(e[5]), *e[2:]) if e[5].workload.checkpointing else e for e in keyed
            ]
        keyed.sort()
        #: every possible victim, best first (lowest priority, least progress), with its node;
        #: each node's list (`victims`) in the same order
        self.order = [(e[3], e[5]) for e in keyed]
        for e in keyed:
            victims[e[3]].append(e[5])
        self._failed: set[tuple[Shape, str, float, bool]] = set()
        self._branches: dict[tuple[str, str], tuple[str, str]] = {}
        self._hosts: dict[tuple[int, Shape], bool] = {}
        # per-GPU-model guarantees: (tenant on the chain, model) -> milli held on that model,
        # for the tenants that have such a guarantee
        self.model_guard: dict[str, list[tuple[str, int]]] = {}  # model -> [(tenant, milli)]
        self.model_usage: dict[tuple[str, str], int] = {}
        if any(t.quota.guaranteed_by_model for t in tree):
            for rw in running:
                m = self._model_of(rw)
                if m is None or rw.stopping:
                    continue
                for a in usage.chain(rw.workload.tenant):
                    if a in tree and m in tree.get(a).quota.guaranteed_by_model:
                        k = (a, m)
                        self.model_usage[k] = self.model_usage.get(k, 0) + rw.allocation.gpu_milli

    def lost(self, rw: RunningWorkload) -> float:
        """The order key of what preempting `rw` now costs: the GPU milli-seconds since it
        started; with `most_service`, for `checkpointing` work (a restart loses only its
        checkpoint) minus one minus its attained service (kept plus this run), so that such
        work goes first, the most served first."""
        ran = max(0.0, self.now - rw.allocation.since) * rw.allocation.gpu_milli
        if self.most_service is not None and rw.workload.checkpointing:
            return -(self.most_service.get(rw.workload.id, 0.0) + ran) - 1.0
        return ran

    def _model_of(self, rw: RunningWorkload) -> str | None:
        a = rw.allocation
        n = self.cap.node_ids.get(a.node)
        if n is None or not a.shares:
            return None
        g = self.cap.gpu_id(n, a.shares[0].gpu_index)
        return None if g is None else self.cap.gpu_model[g]

    def _model_protected(self, rw: RunningWorkload, removed: dict[tuple[str, str], int]) -> bool:
        """True if taking `rw` would cut into a per-GPU-model guarantee of its tenant (or an
        ancestor): that tenant holds no more than its guarantee on the model `rw` runs on."""
        if not self.model_usage:
            return False
        m = self._model_of(rw)
        if m is None:
            return False
        for a in self.usage.chain(rw.workload.tenant):
            if (a, m) not in self.model_usage:
                continue
            g = self.tree.get(a).quota.guaranteed_by_model[m]
            if self.model_usage[(a, m)] - removed.get((a, m), 0) <= g:
                return True
        return False

    def branches(self, a: str, b: str) -> tuple[str, str]:
        k = (a, b)
        r = self._branches.get(k)
        if r is None:
            r = self._branches[k] = branches(self.tree, a, b)
        return r

    def _room(self, tenant: str, milli: int, victim_tenant: str) -> tuple[str, int] | None:
        """(victim's branch, milli it borrows) if work of `victim_tenant` may be preempted for
        `milli` of `tenant`: another tenant, whose branch (below the common ancestor) is over
        its guarantee while the candidate's branch stays within its own. None if not."""
        if victim_tenant == tenant:
            return None
        mine, theirs = self.branches(tenant, victim_tenant)
        if self.usage.of(mine) + milli > guaranteed(self.tree, mine):
            return None
        room = self.usage.of(theirs) - guaranteed(self.tree, theirs)
        return (theirs, room) if room > 0 else None

    def _freed(
        self, rws: list[RunningWorkload], n: int | None = None
    ) -> tuple[int, int, dict[int, tuple[int, int]]]:
        """What stopping `rws` frees on node `n` (default: the first one's node)."""
        cpu = mem = 0
        gpu: dict[int, tuple[int, int]] = {}
        if n is None:
            n = self.cap.node_ids[rws[0].allocation.node] if rws else 0
        name = self.cap.nodes[n].name
        for rw in rws:
            a = rw.allocation
            cpu += a.cpu_milli
            mem += a.memory_mib
            for s in a.shares:
                if s.node != name:
                    continue  # a gang's part on another node
                t = self.cap.share_take(n, s)
                if t is None:
                    continue
                g, smilli, smem = t
                m0, g0 = gpu.get(g, (0, 0))
                gpu[g] = (m0 + smilli, g0 + smem)
        return cpu, mem, gpu

    def fits(self, n: int, shape: Shape, rws: list[RunningWorkload]) -> Placement | None:
        cpu, mem, gpu = self._freed(rws, n)
        return place_on_node(self.cap, n, shape, cpu, mem, gpu)

    def waits_for_stopping(self, shape: Shape) -> Reclaim | None:
        """If `shape` fits once some work that is already stopping has stopped: that work
        (claimed, so no other candidate counts on it too) and the placement."""
        for n in sorted(self.stopping):
            pool = self.stopping[n]
            if not pool or not self.cap.node_ready[n]:
                continue
            chosen: list[RunningWorkload] = []
            fit = None
            for rw in pool:
                chosen.append(rw)
                fit = self.fits(n, shape, chosen)
                if fit is not None:
                    break
            if fit is None:
                continue
            claimed = {id(c) for c in chosen}
            self.stopping[n] = [rw for rw in pool if id(rw) not in claimed]
            return Reclaim(n, (), len(chosen), fit)
        return None

    def eligible(self, rw: RunningWorkload) -> bool:
        """True if `rw` has run `min_runtime_s` by the time victims are chosen for (and, with
        `checkpointing_only`, declares checkpointing)."""
        if self.checkpointing_only and not rw.workload.checkpointing:
            return False
        due = self.young.get(rw.workload.id) if self.young else None
        return due is None or due <= self.at

    def preview(self, tenant: str, shape: Shape, skip: set[int], at: float) -> Reclaim | None:
        """What `find` would choose at time `at` (> now) if nothing changed meanwhile: work
        that has run `min_runtime_s` by then counts. Changes nothing."""
        self.at = at
        try:
            return self.find(tenant, shape, skip)
        finally:
            self.at = self.now

    @contextmanager
    def only_checkpointing(self) -> Iterator[None]:
        """Within the block, only victims that declare checkpointing are eligible: the
        reclaim (or move) of a candidate that has not waited `reclaim_after_s`, which throws
        no progress away."""
        self.checkpointing_only = True
        try:
            yield
        finally:
            self.checkpointing_only = False

    def find(self, tenant: str, shape: Shape, skip: set[int]) -> Reclaim | None:
        """Victims on one node so that `shape` of `tenant` fits, or None. Skips nodes in `skip`.

        Nodes are visited in the order of their best possible victim (lowest priority, then
        least progress); on each, victims are added best first until the candidate fits, and
        the ones not needed are put back. The first `NODES_COMPARED` nodes where it fits are
        compared and the best set wins, so the cost stays bounded on large clusters.
        Work already stopping on a node is not counted as freed here (another candidate may
        have claimed it); only fresh victims are."""
        memo = (shape, tenant, self.at, self.checkpointing_only)
        if memo in self._failed:
            return None
        milli = shape.gpu_milli
        best: tuple[tuple, Reclaim] | None = None
        visited: set[int] = set()
        fits = 0
        rooms: dict[str, tuple[str, int] | None] = {}  # victim tenant -> _room(), this call
        taken = self.taken
        eligible = self.eligible
        for n, first in self.order:
            if n in visited or first.workload.id in taken or not eligible(first):
                continue
            vt = first.workload.tenant
            if vt not in rooms:
                rooms[vt] = self._room(tenant, milli, vt)
            if rooms[vt] is None:
                continue
            visited.add(n)
            if n in skip or not self.cap.node_ready[n] or not self.could_host(n, shape):
                continue
            found = self._on_node(shape, n, rooms, tenant, milli)
            if found is None:
                continue
            score, reclaim = found
            if best is None or score < best[0]:
                best = (score, reclaim)
            fits += 1
            if fits >= NODES_COMPARED:
                break
        if best is None:
            self._failed.add(memo)
            return None
        return best[1]

    def put_back(
        self, n: int, shape: Shape, chosen: list[RunningWorkload], order: list[RunningWorkload]
    ) -> list[RunningWorkload]:
        """`chosen` without the victims that `shape` does not need on node `n`, tried in
        `order` (each one left out if `shape` still fits without it)."""
        for rw in order:
            trial = [c for c in chosen if c is not rw]
            if trial and self.fits(n, shape, trial) is not None:
                chosen = trial
        return chosen

    def could_host(self, n: int, shape: Shape) -> bool:
        """Could node `n` hold `shape` if everything on it stopped (and may `shape` use it:
        gpupool.scheduler.constraints)? (memoized)"""
        k = (n, shape)
        r = self._hosts.get(k)
        if r is None:
            cap = self.cap
            node = cap.nodes[n]
            ok = node.cpu_milli >= shape.cpu_milli and node.memory_mib >= shape.memory_mib
            if shape.where is not None:
                ok = ok and cap.where_mask(shape.where)[n]
            if ok and shape.kind == WHOLE:
                counts: dict[str, int] = {}
                for g in cap.node_gpus[n]:
                    if cap.gpu_ok[g] and cap.gpu_total_mem[g] >= shape.gpu_memory_mib:
                        m = cap.gpu_model[g]
                        if shape.model in (None, m):
                            counts[m] = counts.get(m, 0) + 1
                ok = max(counts.values(), default=0) >= shape.count
            elif ok and shape.kind == FRACTION:
                ok = any(
                    cap.gpu_ok[g] and cap.gpu_shared[g] and shape.model in (None, cap.gpu_model[g])
                    for g in cap.node_gpus[n]
                )
            r = self._hosts[k] = ok
        return r

    def _on_node(
        self,
        shape: Shape,
        n: int,
        rooms: dict[str, tuple[str, int] | None],
        tenant: str,
        milli: int,
    ) -> tuple[tuple, Reclaim] | None:
        sel = Selection(self, tenant, milli, rooms)
        fit = None
        for rw in self.victims[n]:
            if not sel.offer(rw):
                continue
            fit = self.fits(n, shape, sel.chosen)
            if fit is not None:
                break
        chosen = sel.chosen
        if fit is None:
            return None
        # put back victims that are not needed (most valuable first)
        order = sorted(chosen[:-1], key=lambda r: (-r.workload.priority, -self.lost(r)))
        chosen = self.put_back(n, shape, chosen, order)
        fit = self.fits(n, shape, chosen)
        assert fit is not None
        score = (
            max(c.workload.priority for c in chosen),
            sum(self.lost(c) for c in chosen),  # least progress lost, across nodes too
            len(chosen),
            sum(c.allocation.gpu_milli for c in chosen),
            n,
        )
        return score, Reclaim(n, tuple(chosen), 0, fit)

    def find_under_limit(
        self, tenant: str, milli: int, limiting: str, need: int
    ) -> tuple[list[RunningWorkload], int] | None:
        """Victims inside `limiting`'s subtree whose stop brings that subtree `need` milli
        below its limit, for a candidate of `tenant` (within its guarantee) that the limit
        of its ancestor `limiting` blocks. Same victim rules as `find`, on any nodes.

        Returns (victims, how many stopping workloads were counted as freed), with no victims
        when work already stopping in the subtree frees enough; None if the borrowed work
        there is not enough."""
        prefix = limiting + "/"

        def inside(t: str) -> bool:
            return t.startswith(prefix)

        stopping = [
            rw for lst in self.stopping.values() for rw in lst if inside(rw.workload.tenant)
        ]
        need -= sum(rw.allocation.gpu_milli for rw in stopping)
        if need <= 0:
            return [], len(stopping)
        sel = Selection(self, tenant, milli, {})
        freed = 0
        for _, rw in self.order:
            if not inside(rw.workload.tenant) or not sel.offer(rw):
                continue
            freed += rw.allocation.gpu_milli
            if freed >= need:
                return sel.chosen, len(stopping)
        return None

    def commit(self, reclaim: Reclaim) -> None:
        """Mark the victims taken and their GPUs no longer held (for later borrowing checks)."""
        self.take(reclaim.victims)

    def take(self, victims: tuple[RunningWorkload, ...] | list[RunningWorkload]) -> None:
        """Mark `victims` taken and their GPUs no longer held (for later borrowing checks)."""
        for rw in victims:
            self.taken.add(rw.workload.id)
            self._count(rw, -1)

    def give_back(self, victims: tuple[RunningWorkload, ...] | list[RunningWorkload]) -> None:
        """Undo `take` for `victims` (a multi-node reclaim that found too few nodes)."""
        for rw in victims:
            self.taken.discard(rw.workload.id)
            self._count(rw, +1)

    def _count(self, rw: RunningWorkload, sign: int) -> None:
        """Add (+1) or remove (-1) `rw`'s GPUs to its tenant's usage, per model too."""
        milli = rw.allocation.gpu_milli
        if sign > 0:
            self.usage.add(rw.workload.tenant, rw.workload.owner, milli)
        else:
            self.usage.remove(rw.workload.tenant, rw.workload.owner, milli)
        m = self._model_of(rw) if self.model_usage else None
        if m is None:
            return
        for a in self.usage.chain(rw.workload.tenant):
            if (a, m) in self.model_usage:
                self.model_usage[(a, m)] += sign * milli

    def reason(self, victim: RunningWorkload, tenant: str, workload_id: str) -> str:
        w = victim.workload
        _, theirs = self.branches(tenant, w.tenant)
        return (
            f"{tenant} reclaims its guaranteed share for {workload_id}; {theirs} is "
            f"borrowing beyond its guarantee of {gpus_text(guaranteed(self.tree, theirs))}"
        )


class Selection:
    """Victims chosen so far for one candidate of `tenant` asking `milli`, and what they take
    from each borrowing branch and from per-model holdings (so no branch is taken below its
    guarantee and no per-model guarantee is cut). `rooms` caches `Reclaimer._room`."""

    def __init__(
        self,
        rc: Reclaimer,
        tenant: str,
        milli: int,
        rooms: dict[str, tuple[str, int] | None],
    ):
        self.rc, self.tenant, self.milli, self.rooms = rc, tenant, milli, rooms
        self.chosen: list[RunningWorkload] = []
        self.removed: dict[str, int] = {}
        self.removed_model: dict[tuple[str, str], int] = {}

    def offer(self, rw: RunningWorkload) -> bool:
        """Take `rw` if the victim rules allow it (see the module docstring); True if taken."""
        rc, w = self.rc, rw.workload
        if w.id in rc.taken or not rc.eligible(rw):
            return False
        if w.tenant not in self.rooms:
            self.rooms[w.tenant] = rc._room(self.tenant, self.milli, w.tenant)
        room = self.rooms[w.tenant]
        if room is None:
            return False
        theirs, borrowed = room
        if self.removed.get(theirs, 0) >= borrowed:
            return False  # that branch would be back at its guarantee
        if rc._model_protected(rw, self.removed_model):
            return False
        g = rw.allocation.gpu_milli
        self.chosen.append(rw)
        self.removed[theirs] = self.removed.get(theirs, 0) + g
        m = rc._model_of(rw) if rc.model_usage else None
        if m is not None:
            for a in rc.usage.chain(w.tenant):
                if (a, m) in rc.model_usage:
                    self.removed_model[(a, m)] = self.removed_model.get((a, m), 0) + g
        return True
