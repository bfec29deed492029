"""A workload's telemetry across every node its allocation spans (multi-node jobs, gangs).

Each node's `TelemetryLoop` samples only its own GPUs, so an allocation is split by the
node of each share and every node's loop is asked about its own part (the allocation
restricted to that node's shares). The culler and the accounting loop read the joined
figures (`AllocationTelemetry`):

- idle: the least idle node; None (no evidence: never culled) when any node of the
  allocation has no telemetry loop or has not sampled yet. A gang is idle only when
  every GPU on every node is.
- busy: the mean of the nodes' busy fractions weighted by their GPU milli, over the nodes
  that know; None when none does.
- estimated: the part of that busy figure that is an estimate (MPS shares), weighted alike.
- memory: the sum over the nodes (a node without a loop adds 0).

A one-node allocation is handed to its node's loop unchanged, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from gpupool.domain import Allocation


class NodeTelemetryReader(Protocol):
    """What one node's telemetry tells about the part of an allocation on that node
    (`TelemetryLoop` is one)."""

    def idle_seconds(self, allocation: Allocation) -> float | None: ...

    def busy_fraction(self, allocation: Allocation, since: float | None = None) -> float | None: ...

    def estimated_fraction(self, allocation: Allocation, since: float | None = None) -> float: ...

    def memory_mib(self, allocation: Allocation) -> float: ...


def parts_by_node(allocation: Allocation) -> list[tuple[str, Allocation]]:
    """(node, the allocation restricted to that node's shares) in rank order; a one-node
    allocation is itself."""
    if not allocation.multi_node:
        return [(allocation.node, allocation)]
    return [
        (n, dataclasses.replace(allocation, node=n, shares=allocation.on_node(n)))
        for n in allocation.nodes
    ]


class AllocationTelemetry:
    """Per-workload telemetry joined over the nodes' loops in `by_node` (node -> reader)."""

    def __init__(self, by_node: Mapping[str, NodeTelemetryReader]):
        self.by_node = by_node

    def idle_seconds(self, allocation: Allocation) -> float | None:
        """How long every GPU on every node has been idle: the minimum over the nodes
        (0 when any GPU is busy). None when any node has no loop or no sample yet."""
        idle: float | None = None
        for node, part in parts_by_node(allocation):
            tl = self.by_node.get(node)
            got = tl.idle_seconds(part) if tl is not None else None
            if got is None:
                return None
            idle = got if idle is None else min(idle, got)
        return idle

    def busy_fraction(self, allocation: Allocation, since: float | None = None) -> float | None:
        """Busy GPU-seconds per allocated GPU-second since `since`: the nodes' fractions
        weighted by their GPU milli, over the nodes that know. None when none knows."""
        known: list[tuple[float, int]] = []
        for node, part in parts_by_node(allocation):
            tl = self.by_node.get(node)
            got = tl.busy_fraction(part, since) if tl is not None else None
            if got is not None:
                known.append((got, part.gpu_milli))
        if len(known) <= 1:
            return known[0][0] if known else None
        milli = sum(m for _, m in known)
        return sum(f * m for f, m in known) / milli if milli else None

    def estimated_fraction(self, allocation: Allocation, since: float | None = None) -> float:
        """The part (0..1) of `busy_fraction` that is estimated (MPS shares), weighted like
        it: by GPU milli over the nodes that know their busy fraction."""
        known: list[tuple[float, int]] = []
        for node, part in parts_by_node(allocation):
            tl = self.by_node.get(node)
            if tl is not None and tl.busy_fraction(part, since) is not None:
                known.append((tl.estimated_fraction(part, since), part.gpu_milli))
        milli = sum(m for _, m in known)
        return sum(f * m for f, m in known) / milli if milli else 0.0

    def memory_mib(self, allocation: Allocation) -> float:
        """GPU memory the workload's processes use now on all its nodes, MiB."""
        total = 0.0
        for node, part in parts_by_node(allocation):
            tl = self.by_node.get(node)
            if tl is not None:
                total += tl.memory_mib(part)
        return total
