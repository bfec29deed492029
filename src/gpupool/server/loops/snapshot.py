"""The scheduler loop's snapshot read, reusing the last cycle's domain objects.

The scheduler's cache (gpupool.scheduler.cache) saves work on objects it saw last cycle:
a pending `Workload` that is the same object is not classified again, running work that is
the same `RunningWorkload` costs nothing in the capacity diff. `SnapshotReader` keeps, per
workload id, the last cycle's object and the row values it was made of (the workload's
`DOMAIN_COLUMNS`; for running work also its allocation's and shares' rows, whatever may
change them), and so per node and GPU; a row that reads back equal gets the same object,
without converting it again (and the nodes the same tuple when every node is the same). A
domain object is made of those values only, so the snapshot is equal to a fresh read
(`read_snapshot`) and the decisions the same; only the cost differs.

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

from gpupool.domain import GPU, Node, Workload
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
from gpupool.store.rows import domain_workload
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
        #: pending workload id -> (row values, the Workload made of them), as of the last read
        self._pending: dict[str, tuple[tuple[Any, ...], Workload]] = {}
        #: running workload id -> (row values, the RunningWorkload made of them)
        self._running: dict[str, tuple[RunningRows, RunningWorkload]] = {}
        #: node name -> (its values, the Node); GPU uuid -> (its values, the GPU); the tuple
        self._nodes: dict[str, tuple[NodeRows, Node]] = {}
        self._gpus: dict[str, tuple[tuple[Any, ...], GPU]] = {}
        self._node_tuple: tuple[Node, ...] = ()

    def read(self, ctx: AppContext) -> Read:
        """The nodes that run work, the tenants, the running work and `attained_service`,
        read in one transaction, the pending work in queue order, and its stored
        why-pending."""
        with ctx.store.read() as s:
            node_rows = [n for n in NodeRepo(s).rows() if ctx.runs_work_on(n[0][0])]
            tree = TenantRepo(s).tree()
            running_rows = AllocationRepo(s).running_rows()
            pending_rows = WorkloadRepo(s).pending_rows()
            attained = UsageRepo(s).attained_by_tenant()
            attained.update(kept_service(s))
        nodes = self._read_nodes(node_rows)
        old_run = self._running
        run_memo: dict[str, tuple[RunningRows, RunningWorkload]] = {}
        running: list[RunningWorkload] = []
        for rows in running_rows:
            running.append(_kept(old_run, run_memo, rows[0][0], rows, _running_of))
        old = self._pending
        memo: dict[str, tuple[tuple[Any, ...], Workload]] = {}
        stored: dict[str, StoredInfo] = {}
        pending: list[Workload] = []
        for values, info in pending_rows:
            wid = values[0]
            stored[wid] = info
            pending.append(_kept(old, memo, wid, values, _workload_of))
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
