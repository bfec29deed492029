"""Reservations: the node blocked guaranteed work keeps for the rest of a cycle, and when the
work it waits for will have ended.

* `reservation_node`: the usable node where a shape is closest to fitting (and could fit when
  empty);
* `Hold`: who holds a node, and the CPUs and memory it asks for there (kept free even for
  CPU-only work, which may otherwise use a held node: it takes no GPU);
* `expected_start`: the earliest time by which the running work on a node has surely ended
  enough (each at its start + max runtime) for a shape to fit there; None if it depends on
  work without a max runtime.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.scheduler.capacity import CPU_ONLY, MIG, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.feasibility import node_could_hold
from gpupool.scheduler.placement import place_on_node
from gpupool.scheduler.types import RunningWorkload


class Hold:
    """A node kept, for the rest of the cycle, for blocked guaranteed work."""

    __slots__ = ("tenant", "workload_id", "cpu_milli", "memory_mib")

    def __init__(self, tenant: str, workload_id: str, shape: Shape):
        self.tenant = tenant
        self.workload_id = workload_id
        self.cpu_milli = shape.cpu_milli
        self.memory_mib = shape.memory_mib


def reservation_node(cap: CapacityIndex, shape: Shape) -> int | None:
    """The usable node where `shape` is closest to fitting (and could fit when empty): the
    most whole free GPUs of its model, or the shared GPU with the most free milli. CPU-only
    work reserves nothing."""
    if shape.kind in (CPU_ONLY, MIG):  # MIG: instances free one by one, nothing to hold
        return None
    models = [shape.model] if shape.model is not None else cap.models
    best: tuple | None = None
    for m in models:
        idx = cap.whole[m] if shape.kind == WHOLE else cap.frac[m]
        for key in reversed(idx.keys()):
            for item in idx.items_under(key):
                n = item if shape.kind == WHOLE else cap.gpu_node[item]
                if could_ever_fit(cap, n, shape):
                    cand = (key, -n)
                    if best is None or cand > best:
                        best = cand
                    break
            else:
                continue
            break
    return None if best is None else -best[1]


def could_ever_fit(cap: CapacityIndex, n: int, shape: Shape) -> bool:
    """Could node `n` hold `shape` with nothing running on it (and may `shape` use it)?
    (`gpupool.scheduler.feasibility.node_could_hold`)"""
    if shape.where is not None and not cap.where_mask(shape.where)[n]:
        return False
    return node_could_hold(cap.nodes[n], shape)


def expected_start(
    cap: CapacityIndex, n: int, shape: Shape, running: Iterable[RunningWorkload]
) -> float | None:
    """The earliest time by which enough of `running` (the work on node `n`) has reached its
    max runtime for `shape` to fit on `n`, counting what is free now; None if it never does
    that way (work without a max runtime stands in the way, or the node is not ready)."""
    ends: list[tuple[float, str, RunningWorkload]] = []
    for rw in running:
        w = rw.workload
        if w.max_runtime_s is None:
            continue
        started = w.started_at if w.started_at is not None else rw.allocation.since
        ends.append((started + w.max_runtime_s, w.id, rw))
    ends.sort(key=lambda e: (e[0], e[1]))
    name = cap.nodes[n].name
    cpu = mem = 0
    gpu: dict[int, tuple[int, int]] = {}
    for end, _, rw in ends:
        a = rw.allocation
        cpu += a.cpu_milli
        mem += a.memory_mib
        for s in a.shares:
            t = cap.share_take(n, s) if s.node == name else None  # a gang's other nodes
            if t is None:
                continue
            g, smilli, smem = t
            m0, g0 = gpu.get(g, (0, 0))
            gpu[g] = (m0 + smilli, g0 + smem)
        if place_on_node(cap, n, shape, cpu, mem, gpu) is not None:
            return end
    return None
