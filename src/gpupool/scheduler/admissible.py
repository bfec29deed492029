"""Whether a request could ever be admitted: the rule the submit API and the scheduler share.

A request that no registered node could hold even when empty (`reasons.Hardware`), or that a
limit or per-user cap anywhere on its tenant's ancestor chain forbids even with nothing
running (`limits.never_within`), can never run. The scheduler fails such work with the same
reasons; the API refuses it at submit, so it never enters the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain import Node, Request, TenantTree
from gpupool.scheduler.capacity import FRACTION, MIG
from gpupool.scheduler.limits import NeverWithin, never_within
from gpupool.scheduler.placement import shape_of
from gpupool.scheduler.reasons import Hardware


@dataclass(frozen=True, slots=True)
class NeverRuns:
    """Why a request can never run. `field`: the request field at fault (`gpus`,
    `gpu_fraction`, `cpus`, `memory_mib`, `engine`, `node_labels`, `nodes`); `why`: the
    scheduler's own reason for hardware no node has; `limit`: the limit or cap that forbids
    it (then `why` is empty)."""

    field: str
    why: str = ""
    limit: NeverWithin | None = None


def never_runs(
    request: Request, tenant: str, tree: TenantTree, nodes: Sequence[Node]
) -> NeverRuns | None:
    """Why `request` submitted to `tenant` can never run on `nodes`, or None if it can.
    With no node registered yet nothing is refused (nodes may still come)."""
    shape = shape_of(request)
    hardware = Hardware(tuple(nodes))
    why = hardware.never_fits(shape)
    if why is not None:
        profiles = hardware.profiles
        if not any(p.cpu >= shape.cpu_milli and p.mem >= shape.memory_mib for p in profiles):
            field = "memory_mib" if any(p.cpu >= shape.cpu_milli for p in profiles) else "cpus"
        elif shape.where is not None and hardware.never_fits(shape._replace(where=None)) is None:
            # it would fit somewhere: the pins leave out every node that could hold it
            where = shape.where
            field = "engine" if where.engine else "node_labels" if where.labels else "nodes"
        else:
            field = {FRACTION: "gpu_fraction", MIG: "mig"}.get(shape.kind, "gpus")
        return NeverRuns(field, why)
    hit = never_within(tree, tenant, shape.gpu_milli) if shape.gpu_milli else None
    if hit is not None:
        return NeverRuns("gpus", limit=hit)
    return None
