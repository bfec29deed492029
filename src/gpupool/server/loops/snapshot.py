"""The scheduler loop's snapshot read, reusing the last cycle's domain objects.

The scheduler's cache (gpupool.scheduler.cache) saves work on objects it saw last cycle:
a pending `Workload` that is the same object is not classified again, running work that is
the same `RunningWorkload` costs nothing in the capacity diff. `SnapshotReader` keeps, per
workload id, the last cycle's object and the version of the row it was made of
(`WorkloadRow.version`, raised by the database on every write of a domain column; for running
work also its allocation's id), and per node and GPU the row values. Each read first lists
the workloads with their versions (a few columns) and reads in full, and converts, only the
rows whose version moved and the new ones; an unchanged workload gets the same object, and
the nodes the same tuple when every node is the same. A domain object is made of those rows
only, so the snapshot is equal to a fresh read (`read_snapshot`) and the decisions the same;
only the cost differs.

Each read also gives the why-pending stored for each pending workload as that read saw it
(`Read.stored`): the loop passes it to its apply, which writes only the infos that differ
(`WorkloadRepo.set_pending_info`), without reading every pending row again. It is returned,
not kept on the reader, so nothing read by one read is seen by another's apply. A restart
starts empty: its first read is the memory.

The reader belongs to the scheduler loop's own cycle: other loops (the MIG re-layout's
thread) read with `read_snapshot` (`SchedulerLoop.snapshot`), never through it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from gpupool.domain import GPU, Node, Workload, WorkloadState
from gpupool.scheduler import RunningWorkload, Snapshot
from gpupool.server.context import AppContext
from gpupool.store import (
    AllocationRepo,
    NodeRepo,
    TenantRepo,
    UsageRepo,
    WorkloadRepo,
    kept_service,
)
from gpupool.store.allocations import RunningRows, running_of
from gpupool.store.cluster import NodeRows, gpu_of, node_of
from gpupool.store.convert import workload_to_domain
from gpupool.store.rows import DOMAIN_KEYS, domain_workload
from gpupool.store.workloads import StoredInfo

_K = TypeVar("_K")
_V = TypeVar("_V")
_O = TypeVar("_O")


def _kept(
    old: dict[_K, tuple[_V, _O]],
    memo: dict[_K, tuple[_V, _O]],
    key: _K,
    values: _V,
    make: Callable[[_V], _O],
) -> _O:
    """The object `old` keeps for `key` if it was made of values equal to `values`, else
    `make(values)`; either is recorded in `memo` (the next read's `old`)."""
    hit = old.get(key)
    if hit is None or hit[0] != values:
        hit = (values, make(values))
    memo[key] = hit
    return hit[1]


def _moved(old: dict[str, tuple[_K, Any]], wid: str, key: _K) -> bool:
    """True if `old` has no object for `wid` or one made at another version `key`."""
    hit = old.get(wid)
    return hit is None or hit[0] != key


_STATE = DOMAIN_KEYS.index("state")
_PENDING = str(WorkloadState.PENDING)


def _workload_of(values: tuple[Any, ...]) -> Workload:
    return workload_to_domain(domain_workload(values))


def _running_of(rows: RunningRows) -> RunningWorkload:
    return running_of(*rows)


class Read(NamedTuple):
    """One read: the snapshot, the pending work in queue order, and the why-pending stored
    for each pending workload as this read saw it (None: not kept, `reuse=False`)."""

    snapshot: Snapshot
    pending: list[Workload]
    stored: dict[str, StoredInfo] | None


class SnapshotReader:
    """What the scheduler loop reads each cycle, as `read_snapshot` gives it, with the
    objects of unchanged rows reused (see the module). One per loop; not thread-safe.
    `reuse=False`: every row converted afresh, nothing kept and no `stored` (None): what
    `read_snapshot` reads with."""

    def __init__(self, *, reuse: bool = True) -> None:
        self.reuse = reuse
        #: pending workload id -> (its version, the Workload made of its row), as of the last
        #: read
        self._pending: dict[str, tuple[int, Workload]] = {}
        #: running workload id -> ((its version, its allocation's id), the RunningWorkload)
        self._running: dict[str, tuple[tuple[int, int], RunningWorkload]] = {}
        #: node name -> (its values, the Node); GPU uuid -> (its values, the GPU); the tuple
        self._nodes: dict[str, tuple[NodeRows, Node]] = {}
        self._gpus: dict[str, tuple[tuple[Any, ...], GPU]] = {}
        self._node_tuple: tuple[Node, ...] = ()

    def read(self, ctx: AppContext) -> Read:
        """The nodes that run work, the tenants, the running work and `attained_service`,
        read in one transaction, the pending work in queue order, and its stored
        why-pending. Workloads are listed with their versions first; only those whose
        version (for running work: or allocation) moved since the last read, or that are
        new, are read in full and converted."""
        old_run = self._running if self.reuse else {}
        old = self._pending if self.reuse else {}
        with ctx.store.read() as s:
            node_rows = [n for n in NodeRepo(s).rows() if ctx.runs_work_on(n[0][0])]
            tree = TenantRepo(s).tree()
            allocs, workloads = AllocationRepo(s), WorkloadRepo(s)
            if old_run:  # the versions first, then the rows that moved
                run_keys = [(wid, (v, a)) for wid, v, a in allocs.running_versions()]
                stale = [wid for wid, key in run_keys if _moved(old_run, wid, key)]
                fresh_run = {r[0][0]: (v, r) for v, r in allocs.running_rows(stale)}
            else:  # nothing to reuse (the first read): every row at once
                fresh_run = {r[0][0]: (v, r) for v, r in allocs.running_rows()}
                run_keys = [(wid, (v, r[1][0])) for wid, (v, r) in fresh_run.items()]
            fresh: dict[str, tuple[int, tuple[Any, ...]]]
            if old:
                pending_keys = workloads.pending_versions()
                stale = [wid for wid, v, _ in pending_keys if _moved(old, wid, v)]
                fresh = workloads.domain_rows(stale)
            else:
                rows = workloads.pending_rows()
                fresh = {values[0]: (v, values) for v, values, _ in rows}
                pending_keys = [(values[0], v, info) for v, values, info in rows]
            attained = UsageRepo(s).attained_by_tenant()
            attained.update(kept_service(s))
        nodes = self._read_nodes(node_rows)
        run_memo: dict[str, tuple[tuple[int, int], RunningWorkload]] = {}
        running: list[RunningWorkload] = []
        for wid, key in run_keys:
            hit = old_run.get(wid)
            if hit is None or hit[0] != key:
                got = fresh_run.get(wid)
                if got is None:
                    continue  # (PostgreSQL) it stopped running between the two reads
                v, rows = got
                hit = ((v, rows[1][0]), _running_of(rows))
            run_memo[wid] = hit
            running.append(hit[1])
        memo: dict[str, tuple[int, Workload]] = {}
        stored: dict[str, StoredInfo] = {}
        pending: list[Workload] = []
        for wid, v, info in pending_keys:
            p_hit = old.get(wid)
            if p_hit is None or p_hit[0] != v:
                p_got = fresh.get(wid)
                if p_got is None or p_got[1][_STATE] != _PENDING:
                    continue  # (PostgreSQL) it left pending between the two reads
                p_hit = (p_got[0], _workload_of(p_got[1]))
            memo[wid] = p_hit
            stored[wid] = info
            pending.append(p_hit[1])
        if self.reuse:
            self._running, self._pending = run_memo, memo
        snap = Snapshot(nodes, tree, tuple(running), attained)
        return Read(snap, pending, stored if self.reuse else None)

    def _read_nodes(self, node_rows: list[NodeRows]) -> tuple[Node, ...]:
        """The nodes of `node_rows`, reusing the Node (and GPU) objects of unchanged rows,
        and the last tuple itself when every node is the same."""
        old, old_gpus = self._nodes, self._gpus
        memo: dict[str, tuple[NodeRows, Node]] = {}
        gpus: dict[str, tuple[tuple[Any, ...], GPU]] = {}
        out: list[Node] = []
        for rows in node_rows:
            hit = old.get(rows[0][0])
            if hit is None or hit[0] != rows:
                made = tuple(_kept(old_gpus, gpus, g[1], g, gpu_of) for g in rows[1])
                hit = (rows, node_of(rows[0], made))
            else:
                for g, obj in zip(rows[1], hit[1].gpus, strict=True):
                    gpus[g[1]] = (g, obj)
            memo[rows[0][0]] = hit
            out.append(hit[1])
        last = self._node_tuple
        same = len(out) == len(last) and all(map(operator.is_, out, last))
        nodes = last if same else tuple(out)
        if self.reuse:
            self._nodes, self._gpus, self._node_tuple = memo, gpus, nodes
        return nodes
