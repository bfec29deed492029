"""Step 1 of a cycle: pending work -> per-tenant queues in policy order.

`Queues(snapshot, policy, hardware, cache, config).classify(pending)` sorts out unschedulable
work (unknown or inner tenant, a request no node or no limit could ever allow, each with its
reason) and files the rest into per-tenant queues of `Candidate`s, sorted by policy order,
with each tenant's GPU demand. What it works out per workload, and each tenant's sorted queue
while its run of `pending` is the same workloads, are kept in the cache (gpupool.scheduler.
cache) for the next cycle. Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from functools import partial
from itertools import compress, filterfalse
from operator import attrgetter, is_, itemgetter
from typing import TypeVar

from gpupool.domain import Request, Workload
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.feasibility import shape_never_runs, tenant_problem
from gpupool.scheduler.levels import fine_level, level_of
from gpupool.scheduler.ordering import (
    fifo_key,
    in_tenant_key,
    las_in_tenant_key,
    leveled_in_tenant_key,
)
from gpupool.scheduler.placement import shape_of
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.standing import Candidate, Standing
from gpupool.scheduler.tails import LastKeys
from gpupool.scheduler.types import Policy, SchedulerConfig, Snapshot

_V = TypeVar("_V")

_id_of = attrgetter("id")
_tenant_of = attrgetter("tenant")
_request_of = attrgetter("request")
_is_none = partial(is_, None)
#: of a `_shape` (shape, why, GPU milli); `_milli_of` also of a queue entry
_shape_of = itemgetter(0)
_workload_of = itemgetter(1)
_why_of = itemgetter(1)
_milli_of = itemgetter(-1)

#: a request's fields as one tuple, the memo key of its shape: hashed and compared in C
#: (the dataclass's own hash and equality run in Python, per workload classified)
_request_fields = attrgetter(*(f.name for f in fields(Request)))


#: the in-tenant keys with level 0 / no attained service, their defaults (`Queues._adjusted`
#: adds those)
_leveled_0 = leveled_in_tenant_key  # (not a partial: a third of the time per call)
_las_0 = las_in_tenant_key

#: the order key of a queue entry: keys are unique, so sorting by it alone sorts the entries
#: (a third faster than comparing the entries)
_order_key = itemgetter(0)


def _changed_queue(
    q: list[Candidate], drop: list[Candidate], add: list[Candidate]
) -> list[Candidate]:
    """A new sorted queue: `q` without the entries `drop` (each one of the very objects in
    `q`), with `add`. Entries are unique (keys end with the workload id). Many dropped
    ones (a quarter of `q`, after a large admission) are left out by one filter; fewer are
    found by binary search, each after the one before when `drop` is in queue order
    (admitted work: the walk admits in queue order), at once where it is next to it, and the
    rest copied in slices. The added ones that sort after the rest (new work is usually
    submitted last) are appended at once, the others inserted by binary search."""
    out: list[Candidate] = []
    if drop and 4 * len(drop) >= len(q):
        gone = set(map(id, drop))
        out = [e for e in q if id(e) not in gone]
    elif drop:
        cut = _positions(q, drop)
        prev = 0
        for i in cut:
            out += q[prev:i]
            prev = i + 1
        out += q[prev:]
    else:
        out = list(q)
    if add:
        add.sort(key=_order_key)
        # those that sort before the last entry one by one, the others appended at once
        inside = bisect_left(add, out[-1]) if out else 0
        for e in add[:inside]:
            insort(out, e)
        out += add[inside:]
    return out


def _positions(q: list[Candidate], drop: list[Candidate]) -> list[int]:
    """The positions in `q` of the entries `drop` (objects of `q`), ascending."""
    n = len(q)
    lo = 0
    out: list[int] = []
    for e in drop:
        if lo < n and q[lo] is e:
            i = lo
        elif lo + 1 < n and q[lo + 1] is e:
            i = lo + 1
        else:
            i = bisect_left(q, e, lo)
            if i == n or q[i] is not e:  # `drop` is not in queue order
                return sorted(bisect_left(q, e) for e in drop)
        out.append(i)
        lo = i + 1
    return out


def _identity_diff(
    st: Standing, pending: Sequence[Workload]
) -> tuple[list[int], list[Workload]] | None:
    """(ids of the workload objects gone, the workloads new, in the order of `pending`) by
    object identity, in whatever order `pending` lists them; `st.objs` becomes `pending`'s.
    None if an object is listed twice."""
    cur = dict(zip(map(id, pending), pending, strict=True))
    if len(cur) != len(pending):
        return None
    prev = st.objs
    # (C-level filters: cheaper than set differences of the keys; `new` in the order of
    # `pending`, which is also memory order when all are new: much faster to walk)
    gone = list(filterfalse(cur.__contains__, prev))
    new = list(map(cur.__getitem__, filterfalse(prev.__contains__, cur)))
    st.objs = cur
    return gone, new


def _in_order(order: dict[int, Workload], d: dict[int, _V]) -> dict[int, _V]:
    """`d` with its keys in the order of those of `order` (all of `d`'s are there)."""
    keys = list(filter(d.__contains__, order))
    return dict(zip(keys, map(d.__getitem__, keys), strict=True))


def _first_seen(tenants: Iterable[str], count: int) -> dict[str, None]:
    """The first `count` distinct tenants of `tenants`, in order (all of them if fewer)."""
    out: dict[str, None] = {}
    if count:
        for t in tenants:
            if t not in out:
                out[t] = None
                if len(out) == count:
                    break
    return out


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
        #: tenant -> LastKeys.last of its queue, where kept (gpupool.scheduler.tails.Tail)
        self.last_keys: dict[str, dict[Shape, tuple]] = {}

    def classify(self, pending: Sequence[Workload]) -> None:
        """Unschedulable work out; the rest into per-tenant queues, sorted by policy order.

        Queue entries are (order key, workload, shape, GPU milli); keys end with the workload
        id, so they are unique and plain tuple comparison sorts them. With a cache, what is
        worked out per workload is carried over to the next cycle, and so are the sorted queues:
        the next cycle files only the workloads that are new and drops those gone
        (`_classify_changes`)."""
        memo = self.cache.classified(self.hardware, self.tree, self.config, len(pending))
        st = memo.standing
        if self._classify_changes(st, pending, memo.shapes, memo.tenant_why):
            st.seen = self.cache.calls
            return  # (the first cycle too: every workload is new)
        st.reset()  # a workload listed twice or running: not kept for the next cycle
        self._classify_all(pending, memo.entries)

    def _key_of(self) -> Callable[[Workload], tuple]:
        """The order key of a workload inside its queue, with no attained service and level 0
        (`_adjusted` adds those)."""
        if self.policy is Policy.FAIR and self.config.service_levels_s:
            return _leveled_0  # level added by `_adjusted`
        if self.policy is Policy.FAIR:
            return in_tenant_key
        if self.policy is Policy.FIFO:
            return fifo_key
        return _las_0  # attained service added by `_adjusted`

    def _classify_all(self, pending: Sequence[Workload], entries: dict[int, tuple]) -> None:
        """Classify every workload of `pending` when some are listed twice or running (what
        `_classify_changes` does otherwise); `entries` (the cache's, per workload object) is
        updated in place."""
        seen = {rw.workload.id for rw in self.snap.running}
        adjust = self._keeps_attained()
        key_of = self._key_of()
        whole_only = self.policy is Policy.FIFO
        shapes: dict[tuple, tuple[Shape, str | None, int]] = {}
        tenant_why: dict[str, str | None] = {}
        queues = self.queues
        demand = self.pending_demand
        for w in pending:
            wid = w.id
            if wid in seen:
                continue  # already running (or listed twice): nothing to decide
            seen.add(wid)
            k = id(w)
            e = entries.get(k)
            if e is None or e[0] is not w:
                e = entries[k] = self._entry(w, shapes, tenant_why, whole_only, key_of)
            if e[1] is not None:
                self.unschedulable[wid] = e[1]
                continue
            t = w.tenant
            q = queues.get(t)
            if q is None:
                q = queues[t] = []
                demand[t] = 0
            q.append(self._adjusted(wid, e[3]) if adjust else e[3])
            demand[t] += e[2]
        for q in queues.values():
            q.sort(key=_order_key)

    def _entry(
        self,
        w: Workload,
        shapes: dict[tuple, tuple[Shape, str | None, int]],
        tenant_why: dict[str, str | None],
        whole_only: bool,
        key_of: Callable[[Workload], tuple],
    ) -> tuple:
        """(workload, why unschedulable, GPU milli, queue entry) of `w`; `shapes` and
        `tenant_why` memoize per (tenant, request fields) and per tenant."""
        mk = (w.tenant, _request_fields(w.request))
        hit = shapes.get(mk)
        if hit is None:
            hit = shapes[mk] = self._shape(w, tenant_why, whole_only)
        return (w, hit[1], hit[2], (key_of(w), w, hit[0], hit[2]))

    def _shape(
        self, w: Workload, tenant_why: dict[str, str | None], whole_only: bool
    ) -> tuple[Shape, str | None, int]:
        """(shape, why it can never run or None, GPU milli) of `w`'s request."""
        t = w.tenant
        if t not in tenant_why:
            tenant_why[t] = tenant_problem(self.tree, t)
        shape = shape_of(w.request, whole_only)  # = feasibility.request_shape
        why = tenant_why[t] or shape_never_runs(self.hardware, self.tree, t, shape, self.policy)
        return (shape, why, shape.gpu_milli)

    def _adjusted(self, wid: str, base: Candidate) -> Candidate:
        """`base` (keyed with no attained service, level 0) with the workload's attained
        service (LAS) or service level (fair with levels) from the snapshot."""
        attained = self.snap.attained_service
        if wid not in attained:
            return base
        if self.policy is Policy.LAS:
            return ((attained[wid], *base[0][1:]), *base[1:])
        k = base[0]
        levels = self.config.service_levels_s
        if self.config.service_levels_fine_order:
            return ((k[0], fine_level(attained[wid], levels), *k[2:]), *base[1:])
        return ((k[0], level_of(attained[wid], levels), *k[2:]), *base[1:])

    def _keeps_attained(self) -> bool:
        return self.policy is Policy.LAS or bool(
            self.policy is Policy.FAIR and self.config.service_levels_s
        )

    def _appended(
        self, st: Standing, pending: Sequence[Workload]
    ) -> tuple[list[int], list[Workload]] | None:
        """(ids of the workload objects gone, the workloads new) when `pending` is the last
        cycle's pending work in the same order, without the work that started running since
        (SchedulerCache.started) and without the work found unschedulable, with new work
        appended: what the server and the simulator give. Found in O(changes), and one
        C-level pass that checks the order; `st.objs` is brought up to date. None, with
        nothing changed, where `pending` is not that (then `_identity_diff`)."""
        objs = st.objs
        started = self.cache.started(st.seen) if objs else []
        if started is None:
            return None
        wids = st.wids
        gone = dict.fromkeys([wids[wid] for wid in started if wid in wids])
        gone.update(dict.fromkeys(st.unsched))
        m = len(objs) - len(gone)
        if m > len(pending):
            return None
        new = list(pending[m:])  # (one listed twice is found by the caller)
        popped = [(k, objs.pop(k)) for k in gone]
        if not all(map(is_, objs.values(), pending)):  # the first m, in the same order
            objs.update(popped)  # (in another order: `_identity_diff` replaces `objs`)
            return None
        objs.update(zip(map(id, new), new, strict=True))
        return list(gone), new

    def _shapes(
        self,
        new: list[Workload],
        shapes: dict[tuple, tuple],
        tenant_why: dict[str, str | None],
        whole_only: bool,
    ) -> list[tuple[Shape, str | None, int]]:
        """`_shape` of each of `new`, from the memo `shapes` (filled with what it lacks)."""
        keys = list(
            zip(map(_tenant_of, new), map(_request_fields, map(_request_of, new)), strict=True)
        )
        hits: list = list(map(shapes.get, keys))
        for i in compress(range(len(hits)), map(_is_none, hits)):
            hit = shapes.get(keys[i])
            if hit is None:
                hit = shapes[keys[i]] = self._shape(new[i], tenant_why, whole_only)
            hits[i] = hit
        return hits

    def _file_schedulable(
        self,
        st: Standing,
        new: list[Workload],
        hits: list[tuple[Shape, str | None, int]],
        key_of: Callable[[Workload], tuple],
        add: dict[str, list[Candidate]],
    ) -> None:
        """File the workloads `new`, all schedulable (`hits`: their `_shape`s), in `st` and
        in `add` (per tenant): what `_classify_changes`'s loop does one by one, in C-level
        passes (the first cycle files every pending workload)."""
        ks = list(map(id, new))
        wids = list(map(_id_of, new))
        tenants = list(map(_tenant_of, new))
        millis = list(map(_milli_of, hits))
        filed = list(zip(map(key_of, new), new, map(_shape_of, hits), millis, strict=True))
        attained = self.snap.attained_service
        if attained and self._keeps_attained():
            served = st.served
            for i in compress(range(len(new)), map(attained.__contains__, wids)):
                base = filed[i]
                wid = wids[i]
                filed[i] = self._adjusted(wid, base)
                served[wid] = attained[wid]
                if filed[i] is not base:
                    st.adjusted.add(wid)
        st.wids.update(zip(wids, ks, strict=True))
        st.sched.update(zip(ks, filed, strict=True))
        for t, f in zip(tenants, filed, strict=True):
            a = add.get(t)
            if a is None:
                add[t] = [f]
            else:
                a.append(f)
        demand = st.demand
        for t, a in add.items():
            demand[t] = demand.get(t, 0) + sum(map(_milli_of, a))

    def _file_each(
        self,
        st: Standing,
        new: list[Workload],
        hits: list[tuple[Shape, str | None, int]],
        key_of: Callable[[Workload], tuple],
        add: dict[str, list[Candidate]],
    ) -> None:
        """File the workloads `new` (`hits`: their `_shape`s) one by one in `st` and in
        `add` (per tenant): the unschedulable ones with their reasons, the others as
        `_file_schedulable` does."""
        wids, sched, unsched, demand = st.wids, st.sched, st.unsched, st.demand
        adjust = self._keeps_attained()
        attained = self.snap.attained_service
        for w, hit in zip(new, hits, strict=True):
            # (= self._entry, written out)
            t = w.tenant
            wid = w.id
            k = id(w)
            wids[wid] = k
            why = hit[1]
            if why is not None:
                unsched[k] = (wid, why)
                continue
            milli = hit[2]
            filed = (key_of(w), w, hit[0], milli)
            if adjust and wid in attained:
                base = filed
                filed = self._adjusted(wid, base)
                st.served[wid] = attained[wid]
                if filed is not base:
                    st.adjusted.add(wid)
            sched[k] = filed
            a = add.get(t)
            if a is None:
                add[t] = [filed]
            else:
                a.append(filed)
            demand[t] = demand.get(t, 0) + milli

    def _classify_changes(
        self,
        st: Standing,
        pending: Sequence[Workload],
        shapes: dict[tuple, tuple],
        tenant_why: dict[str, str | None],
    ) -> bool:
        """Bring `st` (the last cycle's classification) up to date with `pending`: file the
        workloads that are new (by identity), drop those gone, re-key those whose attained
        service changed; then take queues, demand and unschedulable from it. False when it
        cannot (a workload listed twice or running): the caller resets `st` and classifies
        afresh, with the same result. With no last cycle (`st` empty) every
        workload is new: a full classification. `shapes` and `tenant_why` memoize `_shape`
        (the cache's, kept between cycles).

        The diff is `_appended`'s where it applies, else `_identity_diff`'s (then the running
        work is checked against all the pending work, and `st`'s records are put in the
        order of `pending`)."""
        diff = self._appended(st, pending)
        whole = diff is None
        if diff is None:
            diff = _identity_diff(st, pending)
            if diff is None:
                return False
        gone, new = diff
        #: per tenant, the entries to drop and to add (applied at the end, in one go)
        drop: dict[str, list[Candidate]] = {}
        add: dict[str, list[Candidate]] = {}
        sched, unsched, demand, adjusted = st.sched, st.unsched, st.demand, st.adjusted
        wids = st.wids
        gone_wids: set[str] = set()
        for k in gone:
            filed = sched.pop(k, None)
            if filed is None:
                wid = unsched.pop(k)[0]
            else:
                w = filed[1]
                wid = w.id
                t = w.tenant
                d = drop.get(t)
                if d is None:
                    drop[t] = [filed]
                else:
                    d.append(filed)
                demand[t] -= filed[3]
            del wids[wid]
            gone_wids.add(wid)
        new_wids = {w.id for w in new}
        if len(new_wids) != len(new) or not wids.keys().isdisjoint(new_wids):
            return False  # a workload listed twice
        running = self.cache.running_ids()
        if not running.isdisjoint(new_wids):
            return False
        # (`_appended`: the work still filed was not running last cycle, and what started
        # since is gone)
        if whole and not running.isdisjoint(wids.keys()):
            return False  # work filed before is running now, and also still pending
        if adjusted:
            adjusted -= gone_wids
        served = st.served
        if served:
            for wid in gone_wids:
                served.pop(wid, None)
        whole_only = self.policy is Policy.FIFO
        key_of = self._key_of()
        adjust = self._keeps_attained()
        attained = self.snap.attained_service
        hits = self._shapes(new, shapes, tenant_why, whole_only)
        if list(map(_why_of, hits)).count(None) == len(hits):
            self._file_schedulable(st, new, hits, key_of, add)
        else:
            self._file_each(st, new, hits, key_of, add)
        if adjust:
            # workloads whose attained service (so their key) may have changed since filed
            objs = st.objs
            for wid in (attained.keys() & wids.keys()) | adjusted:
                if wid in new_wids:
                    continue
                value = attained.get(wid)
                if value is not None and served.get(wid) == value:
                    continue  # keyed with this service already (the config is the same)
                k = wids[wid]
                was = sched.get(k)
                if was is None:
                    continue  # unschedulable
                if value is None:
                    served.pop(wid, None)
                else:
                    served[wid] = value
                t = was[1].tenant
                base = (key_of(objs[k]), *was[1:])
                filed = self._adjusted(wid, base)
                if filed != was:
                    drop.setdefault(t, []).append(was)
                    add.setdefault(t, []).append(filed)
                    sched[k] = filed
                    if filed is base:
                        adjusted.discard(wid)
                    else:
                        adjusted.add(wid)
        for t in drop.keys() | add.keys():
            d, a = drop.get(t, []), add.get(t, [])
            q = st.queues[t] = _changed_queue(st.queues.get(t, []), d, a)
            lasts = st.lasts.get(t)
            if lasts is None:
                lasts = st.lasts[t] = LastKeys()
            lasts.update(q, d, a)
        for t in [t for t, q in st.queues.items() if not q]:
            del st.queues[t]
            del st.demand[t]
            del st.lasts[t]
        if whole:  # new work was filed in the order of `pending`, the rest is as it was
            st.sched = sched = _in_order(st.objs, sched)
            st.unsched = unsched = _in_order(st.objs, unsched)
        # in the order a full classification gives: tenants, and unschedulable work, in the
        # order they first appear in `pending` (that of `sched` and `unsched`)
        order = _first_seen(map(_tenant_of, map(_workload_of, sched.values())), len(st.queues))
        self.queues = {t: st.queues[t] for t in order}
        self.pending_demand = {t: st.demand[t] for t in order}
        self.last_keys = {t: st.lasts[t].last for t in order}
        if unsched:
            self.unschedulable = dict(unsched.values())
        return True

    # -- 3. the walk -----------------------------------------------------------------------
