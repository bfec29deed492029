"""A tiny first-fit FIFO stand-in for `gpupool.scheduler.cycle`, used only while the real
scheduler is being written."""

from __future__ import annotations

from gpupool.domain import Allocation, Share
from gpupool.scheduler.types import Admission, Decisions, PendingInfo


def cycle(snapshot, pending, now, config):
    used: dict[tuple[str, int], int] = {}
    for rw in snapshot.running:
        for s in rw.allocation.shares:
            used[(s.node, s.gpu_index)] = used.get((s.node, s.gpu_index), 0) + s.milli
    admissions, waiting = [], {}
    for w in sorted(pending, key=lambda w: (w.submitted_at, w.id)):
        r = w.request
        placed = None
        for n in snapshot.nodes:
            free = [g for g in n.gpus if used.get((n.name, g.index), 0) == 0]
            if r.gpus and len(free) >= r.gpus:
                placed = (n, [(g, 1000, g.memory_mib) for g in free[: r.gpus]])
            elif r.gpu_milli:
                for g in n.gpus:
                    if (
                        g.sharing != "exclusive"
                        and used.get((n.name, g.index), 0) + r.gpu_milli <= 1000
                    ):
                        placed = (n, [(g, r.gpu_milli, r.gpu_memory_mib)])
                        break
            if placed:
                break
        if not placed:
            waiting[w.id] = PendingInfo("no room", len(waiting) + 1, 1)
            continue
        n, gs = placed
        shares = tuple(Share(n.name, g.index, g.uuid, m, mem) for g, m, mem in gs)
        for g, m, _ in gs:
            used[(n.name, g.index)] = used.get((n.name, g.index), 0) + m
        admissions.append(Admission(w.id, Allocation(w.id, n.name, shares, now)))
    return Decisions(admissions=tuple(admissions), pending=waiting)
