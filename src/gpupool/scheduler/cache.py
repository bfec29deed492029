"""What a scheduler keeps from one cycle to the next: one explicit object its caller owns.

Contract (`SchedulerCache`):

* The caller (the server's scheduler loop, the simulator, a benchmark) makes one and passes
  it to every `cycle(snapshot, pending, now, config, cache)` of one scheduler. It is not
  thread-safe: one cycle at a time. Nothing else in the scheduler keeps state between cycles.
* Decisions are identical with and without it (`cache=None` works everything out afresh);
  it only saves work. Dropping it, or `clear()`, costs speed, never correctness.
* It never does I/O and holds no handles: only values derived from earlier snapshots.

What it keeps:

* the capacity index (free resources and the placement indexes) as of the last cycle. The
  next cycle first undoes the last one's own `assume`s and `hold`s (but the admissions
  that run now with the allocation they were admitted with: those stay taken), then
  applies the difference between the two snapshots: running workloads gone and new (by
  object identity, so work that stayed the same object costs nothing; a new object for a
  workload id already held is matched by id: one whose allocation changed counts as gone
  and new; found by one pass of identity tests over the last running work, which costs
  least where the work that still runs is listed first in the same order, as the server
  and the simulator list it: work listed in another order counts as gone and new, and
  nothing moves), and nodes whose state, GPU health, CPUs or memory changed; only the nodes
  touched are refiled. What it cannot diff cheaply — nodes added, removed, renamed or
  reordered, GPUs changed, a workload listed twice — rebuilds it;
* the `Hardware` summary (what nodes could ever hold), while the nodes' hardware and labels
  are the same (labels decide which nodes pinned work may use);
* per pending workload object (by identity): its shape, order key and unschedulable reason,
  and per tenant its sorted queue while its run of pending work is the same workloads; kept
  while the hardware, the tenant tree (the same object) and the config are the same; pruned
  when it grows past about twice the pending queue. The next cycle diffs `pending` against
  the last one's in O(changes) where it is what the server and the simulator give: the same
  objects in the same order, without the work that left it (admitted by the last cycle,
  new among the running work: `started`; or unschedulable), with new work appended (checked
  by one C-level pass over the queue); otherwise by the identity of every workload;
* `PendingInfo`s by (reason, position, tenant position): immutable, so equal ones are shared
  by workloads and cycles instead of built again; dropped when past ~4x the pending queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupool.domain import Node, TenantTree
from gpupool.scheduler.capacity import CapacityIndex, Takes
from gpupool.scheduler.mix import class_key
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.standing import Standing
from gpupool.scheduler.types import PendingInfo, RunningWorkload, SchedulerConfig

#: per running workload id: (the RunningWorkload seen last, its allocation, what it takes,
#: (tenant, user), stopping)
_Entry = tuple[RunningWorkload, object, Takes, tuple[str, str], bool]


@dataclass(slots=True)
class CacheStats:
    """How the capacity index was brought up to date (for tests and benchmarks)."""

    rebuilds: int = 0
    diffs: int = 0
    allocations_added: int = 0
    allocations_removed: int = 0
    nodes_changed: int = 0
    #: admissions of the last cycle found running as admitted: kept taken, not re-applied
    admissions_kept: int = 0


class _Classified:
    """Results of classification, valid for one (hardware, tenants, config)."""

    __slots__ = ("hardware", "tenants", "config", "entries", "shapes", "tenant_why", "standing")

    def __init__(self, hardware: Hardware, tenants: TenantTree, config: SchedulerConfig):
        self.hardware = hardware
        self.tenants = tenants
        self.config = config
        #: id(workload) -> (workload, why unschedulable, GPU milli, queue entry)
        self.entries: dict[int, tuple] = {}
        #: (tenant, the request's fields) -> (shape, why it can never run or None, GPU milli)
        self.shapes: dict[tuple, tuple] = {}
        #: tenant -> why it can have no work (unknown, inner) or None
        self.tenant_why: dict[str, str | None] = {}
        #: the last cycle's classified pending work
        self.standing = Standing()


def _diff(
    prev: dict[int, RunningWorkload], running: tuple[RunningWorkload, ...]
) -> tuple[list[RunningWorkload], list[RunningWorkload]]:
    """(the objects of `prev` gone, the objects of `running` new), by identity, where `prev`
    is the last call's running work in its order: the longest run of `prev` that `running`
    lists first in the same order (the work that still runs: the server and the simulator
    keep it in order and append what starts) is kept, the rest of `prev` is gone, the rest
    of `running` new. Work listed in another order counts as gone and new (nothing moves:
    see `capacity`); an object listed twice is new twice (`capacity` rebuilds then). One
    pass of identity tests over `prev`: no dict of the running work."""
    gone: list[RunningWorkload] = []
    j = 0
    m = len(running)
    for rw in prev.values():
        if j < m and rw is running[j]:
            j += 1
        else:
            gone.append(rw)
    return gone, list(running[j:])


class SchedulerCache:
    """State one scheduler keeps between cycles; see the module docstring for the contract."""

    def __init__(self) -> None:
        self.stats = CacheStats()
        #: `capacity` calls so far (never reset: `started` is valid for one call only)
        self._calls = 0
        self.clear()

    def clear(self) -> None:
        """Forget everything (the next cycle works everything out afresh)."""
        self._cap: CapacityIndex | None = None
        self._taken: dict[str, _Entry] = {}
        #: id(running workload) -> it, as of the last `capacity` call (the diff's other side)
        self._objs: dict[int, RunningWorkload] = {}
        #: the running ids where `_taken` cannot hold them (a workload listed twice)
        self._running_ids: frozenset[str] | None = None
        #: the ids of the work admitted by the last cycle and of the running work new (by
        #: identity) in the last `capacity` call; None where it rebuilt
        self._started: list[str] | None = None
        self._held: dict[tuple[str, str], int] = {}
        self._staying: dict[tuple[str, str], int] = {}
        self._limited: dict[str, RunningWorkload] = {}
        self._stopping = 0
        self._checkpointing = 0
        self._hw_nodes: tuple[Node, ...] | None = None
        self._hardware: Hardware | None = None
        self._classified: _Classified | None = None
        self._infos: dict[tuple[str, int, int], PendingInfo] = {}
        self._tails: dict[str, tuple] = {}

    # -- capacity ---------------------------------------------------------------------------

    def capacity(
        self, nodes: tuple[Node, ...], running: tuple[RunningWorkload, ...]
    ) -> CapacityIndex:
        """The capacity index for this snapshot. The cycle may `assume` and `hold` on it; the
        next call undoes that first. `held()` then gives the GPU milli held per (tenant, user)."""
        self._calls += 1
        cap = self._cap
        if cap is None:
            return self._rebuild(nodes, running)
        # only the running work that is new or gone (by identity) is looked at
        prev = self._objs
        gone_objs, fresh = _diff(prev, running)
        new = fresh
        # the last cycle's admissions that run now with the allocation they were admitted
        # with stay taken (their log entries): not undone and applied again
        kept: list[tuple[RunningWorkload, int]] = []
        logged: list[tuple[int, list[tuple[int, int, int]], int, int]] = []
        admitted = cap.admitted()
        if admitted:
            rest: list[RunningWorkload] = []
            for rw in new:
                hit = admitted.get(rw.workload.id)
                if hit is not None and (hit[1] is rw.allocation or hit[1] == rw.allocation):
                    kept.append((rw, hit[0]))
                else:
                    rest.append(rw)
            new = rest
            # (admitted work may also have ended already, or not be running yet)
            self._started = [*admitted, *(rw.workload.id for rw in new)]
            logged = cap.log_entries([i for _, i in kept])
            touched = cap.revert_cycle({i for _, i in kept})
        else:
            self._started = [rw.workload.id for rw in new]
            touched = cap.revert_cycle()
        if nodes is not cap.nodes:
            changed = cap.update_nodes(nodes)
            if changed is None:
                return self._rebuild(nodes, running)
            self.stats.nodes_changed += len(changed)
            touched |= changed
        taken = self._taken
        gone: dict[str, _Entry] = {}
        for rw in gone_objs:
            wid = rw.workload.id
            gone[wid] = taken.pop(wid)
        if kept and not self._keep(cap, kept, logged, touched):
            return self._rebuild(nodes, running)  # listed twice: no diff by id
        added = len(kept)
        removed = 0
        count = self._count
        for rw in new:
            w = rw.workload
            wid = w.id
            if wid in taken:
                return self._rebuild(nodes, running)  # listed twice: no diff by id
            e = gone.pop(wid, None)
            if e is not None:
                a = rw.allocation
                # the same allocation (tenant, user or stopping may differ): nothing moves
                if e[1] is a or e[1] == a:
                    old = e[0].workload
                    e2: _Entry = (rw, a, e[2], e[3], rw.stopping)
                    if (
                        e[4] == rw.stopping
                        and old.max_runtime_s is None
                        and w.max_runtime_s is None
                        and old.checkpointing is w.checkpointing
                        and old.tenant == w.tenant
                        and old.owner == w.owner
                    ):  # counted the same: only the entry changes (a snapshot of new objects)
                        taken[wid] = e2
                        continue
                    count(e, -1)
                    e2 = taken[wid] = (rw, a, e[2], (w.tenant, w.owner), rw.stopping)
                    count(e2, 1)
                    continue
                count(e, -1)
                cap.apply_takes(e[2], 1)  # its allocation changed: give the old one back
                touched.add(e[2][0])
                touched.update(e[2][5])
                removed += 1
            t = cap.takes_of(rw)
            cap.apply_takes(t, -1)
            touched.add(t[0])
            touched.update(t[5])
            added += 1
            e = taken[wid] = (rw, rw.allocation, t, (w.tenant, w.owner), rw.stopping)
            count(e, 1)
        for e in gone.values():
            cap.apply_takes(e[2], 1)
            touched.add(e[2][0])
            touched.update(e[2][5])
            count(e, -1)
            removed += 1
        for rw in gone_objs:
            del prev[id(rw)]
        prev.update(zip(map(id, fresh), fresh, strict=True))  # (now in the order of `running`)
        touched.discard(-1)
        cap.refile(touched)
        self.stats.diffs += 1
        self.stats.allocations_added += added
        self.stats.allocations_removed += removed
        return cap

    def _keep(
        self,
        cap: CapacityIndex,
        kept: list[tuple[RunningWorkload, int]],
        logged: list[tuple[int, list[tuple[int, int, int]], int, int]],
        touched: set[int],
    ) -> bool:
        """File the last cycle's admissions that run now as admitted (`kept`, with `logged`:
        what each `assume` took) as running work: their resources are taken already (not
        undone by `revert_cycle`). False if one is listed twice (then the caller rebuilds)."""
        taken = self._taken
        mig = cap.gpu_mig
        any_mig = bool(cap.mig_nodes)
        keep_running = cap.keep_running
        count = self._count
        # summed here and counted in once at the end (as `mix.add` and `_count` one by one):
        # per class key [workloads, milli, CPU, memory]; per (tenant, user) GPU milli held
        mix: dict[tuple, list[int]] = {}
        held: dict[tuple[str, str], int] = {}
        checkpointing = 0
        for (rw, _), (n, takes, cpu, mem) in zip(kept, logged, strict=True):
            w = rw.workload
            wid = w.id
            if wid in taken:
                return False
            if not any_mig or all(mig[g] is None for g, _, _ in takes):
                # what `takes_of` gives for the allocation it was admitted with (built from
                # the same placement), without reading the allocation again
                ts = tuple(takes)
                milli = ts[0][1] if len(ts) == 1 else sum([m for _, m, _ in ts])
                t: Takes = (n, ts, cpu, mem, milli, ())
                # taken since its admission: only counted in the mix (= keep_running(t))
                k = class_key(ts, cpu, mem, milli)
                if k:
                    c = mix.get(k)
                    if c is None:
                        mix[k] = [1, milli, cpu, mem]
                    else:
                        c[0] += 1
                        c[1] += milli
                        c[2] += cpu
                        c[3] += mem
            else:  # a MIG instance is held whole, whatever share of it was assumed
                t = cap.takes_of(rw)
                if t[0] == n and not t[5] and t[2:4] == (cpu, mem) and t[1] == tuple(takes):
                    keep_running(t)
                else:  # (not expected) it takes other than assumed: undo that, apply this
                    cap.release(n, takes, cpu, mem)
                    touched.add(n)
                    cap.apply_takes(t, -1)
                    touched.add(t[0])
                    touched.update(t[5])
            owner = (w.tenant, w.owner)
            e: _Entry = (rw, rw.allocation, t, owner, rw.stopping)
            taken[wid] = e
            if e[4] or w.max_runtime_s is not None:
                count(e, 1)
                continue
            # = count(e, 1) for work not stopping and without a max runtime
            if w.checkpointing:
                checkpointing += 1
            if t[4]:
                held[owner] = held.get(owner, 0) + t[4]
        cap.mix.add_counted(mix)
        self._checkpointing += checkpointing
        for sums in (self._held, self._staying):
            for owner, milli in held.items():
                sums[owner] = sums.get(owner, 0) + milli
        self.stats.admissions_kept += len(kept)
        return True

    def _count(self, e: _Entry, sign: int) -> None:
        """Add (1) or take away (-1) what entry `e` holds in the per-(tenant, user) sums, and
        the entry's workload in `limited()` if it has a max runtime."""
        w = e[0].workload
        if e[4]:
            self._stopping += sign
        if w.checkpointing:
            self._checkpointing += sign
        if w.max_runtime_s is not None:
            if sign > 0:
                self._limited[w.id] = e[0]
            else:
                self._limited.pop(w.id, None)
        milli = e[2][4]
        if not milli:
            return
        k = e[3]
        v = self._held.get(k, 0) + sign * milli
        if v:
            self._held[k] = v
        else:
            del self._held[k]
        if not e[4]:
            v = self._staying.get(k, 0) + sign * milli
            if v:
                self._staying[k] = v
            else:
                del self._staying[k]

    def started(self, since: int) -> list[str] | None:
        """The ids of the workloads the cycle before the last `capacity` call admitted, and
        of the running workloads new (by object identity: started, or a new object for running
        work) in that call: the pending work that may have left the queue since, besides
        unschedulable work. Only if the call before it was call number `since` (`calls`);
        None where that is not so or the last call rebuilt (unknown)."""
        if since != self._calls - 1:
            return None
        return self._started

    @property
    def calls(self) -> int:
        """How many `capacity` calls this cache has seen."""
        return self._calls

    def running_ids(self) -> set[str] | Any:
        """The ids of the running work of the last `capacity` call (read-only)."""
        if self._running_ids is not None:
            return self._running_ids
        return self._taken.keys()

    def held(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """GPU milli held per (tenant, user) by the running work of the last `capacity` call:
        all of it, and without work that is stopping. Read-only for the caller."""
        return self._held, self._staying

    def stopping(self) -> int:
        """How many workloads of the last `capacity` call are stopping."""
        return self._stopping

    def checkpointing(self) -> int:
        """How many workloads of the last `capacity` call declare checkpointing."""
        return self._checkpointing

    def limited(self) -> dict[str, RunningWorkload]:
        """The running work of the last `capacity` call that has a max runtime, by workload
        id (kept by the same diff). Read-only for the caller."""
        return self._limited

    def _rebuild(
        self, nodes: tuple[Node, ...], running: tuple[RunningWorkload, ...]
    ) -> CapacityIndex:
        cap = CapacityIndex(tuple(nodes), running)
        self._started = None
        self._taken = {}
        self._objs = dict(zip(map(id, running), running, strict=True))
        self._running_ids = None
        self._held = {}
        self._staying = {}
        self._limited = {}
        self._stopping = 0
        self._checkpointing = 0
        dup = False
        for rw, t in zip(running, cap.running_takes, strict=True):
            w = rw.workload
            dup = dup or w.id in self._taken
            e = self._taken[w.id] = (rw, rw.allocation, t, (w.tenant, w.owner), rw.stopping)
            self._count(e, 1)
        cap.running_takes = []  # kept here, per workload id, from now on
        cap.start_cycle_log()
        self.stats.rebuilds += 1
        # a workload listed twice cannot be diffed by id: rebuild again next time
        self._cap = None if dup else cap
        if dup:
            self._taken = {}
            self._running_ids = frozenset(rw.workload.id for rw in running)
        return cap

    # -- hardware and classification --------------------------------------------------------

    def hardware(self, nodes: tuple[Node, ...]) -> Hardware:
        """`Hardware(nodes)`; the same object while the nodes' hardware is the same."""
        if self._hardware is not None and (nodes is self._hw_nodes or nodes == self._hw_nodes):
            return self._hardware
        hw = Hardware(nodes)
        old = self._hardware
        if (
            old is not None
            and old.empty == hw.empty
            and old.profiles == hw.profiles
            and old.labels == hw.labels
        ):
            hw = old  # e.g. only heartbeats or states changed
        self._hw_nodes = nodes
        self._hardware = hw
        return hw

    def classified(
        self,
        hardware: Hardware,
        tenants: TenantTree,
        config: SchedulerConfig,
        pending: int,
    ) -> _Classified:
        """The classification memo for these inputs (updated in place by the cycle): per
        workload object, per (tenant, request) and the last cycle's classified pending work;
        a fresh one when the inputs changed or it grew past about twice `pending`."""
        c = self._classified
        if (
            c is None
            or c.hardware is not hardware
            or c.tenants is not tenants
            or c.config != config
            or len(c.entries) > 2 * pending + 1000
        ):
            c = self._classified = _Classified(hardware, tenants, config)
        elif len(c.shapes) > 2 * pending + 1000:
            c.shapes.clear()
        return c

    def info_pool(self, pending: int) -> dict[tuple[str, int, int], PendingInfo]:
        """Shared `PendingInfo`s by (reason, position, tenant position), filled by the cycle;
        emptied when it grows past about four times `pending`."""
        if len(self._infos) > 4 * pending + 4096:
            self._infos = {}
        return self._infos

    def tails(self) -> dict[str, tuple]:
        """Per tenant, its sorted queue of the cycle that last read it and that queue's summary,
        `(queue, summary)`: what the walk needs to answer the rest of a queue at once
        (gpupool.scheduler.tails.Tail); replaced when the tenant's queue is a new one (the
        old queue let go of then, not kept until a clean-up). Emptied when it holds more than
        1,024 tenants (tenants that come and go)."""
        if len(self._tails) > 1024:
            self._tails = {}
        return self._tails
