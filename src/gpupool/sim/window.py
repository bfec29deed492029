"""The replay's pending window: per tenant and request shape, the first `size` waiting
workloads in the scheduler's in-tenant order (docs/scenarios.md, `pending_window`).

The server passes all pending work to each cycle; a replay of a long trace passes only what
the scheduler would walk first, for speed. The order is the scheduler's own (priority, then,
with service levels, the level, then submit time: `gpupool.scheduler.ordering`), and there
is one queue per request shape because the scheduler skips a shape once it has failed, so
waiting 8-GPU jobs must not hide a 1-GPU job that fits. A workload's level here is that of
its own kept service, fixed while it waits: the siblings' levels and the order inside a level
(`SchedulerConfig.service_levels_siblings_s`, `service_levels_fine_order`) move while work
waits, and apply only to the work the window shows (an approximation, docs/scenarios.md).
Pure bookkeeping: no clock, no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from gpupool.domain import Request, Workload
from gpupool.scheduler.levels import pending_level
from gpupool.scheduler.ordering import in_tenant_key, leveled_in_tenant_key

QueueId = tuple[str, Request]


class PendingWindow:
    """Waiting workloads by (tenant, request), each queue sorted; the window of each queue is
    cached until the queue changes within its first `size` entries."""

    def __init__(self, size: int, levels_s: tuple[float, ...]):
        self.size = size
        #: service-level thresholds of the in-tenant order (empty: no levels)
        self.levels_s = levels_s
        self.queues: dict[QueueId, list[tuple]] = {}
        self._windows: dict[QueueId, tuple[Workload, ...]] = {}
        self._keys: dict[str, tuple] = {}

    def add(self, w: Workload, service: Mapping[str, float]) -> None:
        """Queue `w`; `service` gives its kept service (for its level)."""
        lv = self.levels_s
        key = self._keys[w.id] = (
            leveled_in_tenant_key(w, pending_level(w, service, lv)) if lv else in_tenant_key(w)
        )
        qid = (w.tenant, w.request)
        q = self.queues.setdefault(qid, [])
        i = bisect.bisect_left(q, key)
        q.insert(i, key)
        if i < self.size:
            self._windows.pop(qid, None)

    def remove(self, w: Workload) -> None:
        qid = (w.tenant, w.request)
        q = self.queues[qid]
        key = self._keys.pop(w.id)
        i = bisect.bisect_left(q, key)
        if i < len(q) and q[i] == key:
            del q[i]
            if i < self.size:
                self._windows.pop(qid, None)
            if not q:
                del self.queues[qid]

    def hidden(self) -> set[str]:
        """Tenants with a queue longer than the window (work a cycle cannot see)."""
        return {qid[0] for qid, q in self.queues.items() if len(q) > self.size}

    def visible(self, pending: Mapping[str, Workload]) -> list[Workload]:
        """The first `size` of every queue (`pending`: the waiting workloads by id)."""
        out: list[Workload] = []
        k = self.size
        windows = self._windows
        for qid, q in self.queues.items():
            win = windows.get(qid)
            if win is None:
                win = windows[qid] = tuple(pending[key[-1]] for key in q[:k])
            out.extend(win)
        return out
