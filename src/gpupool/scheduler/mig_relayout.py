"""Idle re-layout (optional, off by default): which idle `mig` GPUs to cut anew so that MIG
requests no current layout can serve may run.

`plan_relayouts(nodes, running, pending)` is pure. Rules:
* only pending MIG requests that fit nowhere now count (`find_placement` finds no free
  instance), in submit order;
* only a GPU in `mig` mode that no running work holds, healthy, on a ready node with the
  CPUs and memory the request asks for, of a model with the profile, whose layout has no
  instance of that profile, is re-laid; never a GPU with running work;
* the new layout is `all-<profile>`; a GPU is re-laid at most once per plan, and another GPU
  only while the waiting requests of that profile outnumber the instances planned for them;
* GPUs whose layout serves other waiting requests are left alone (first the ones with no
  layout, then those whose instances no pending request asks for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain import GPUHealth, Node, SharingMode, Workload
from gpupool.domain.mig import instances_of, model_for
from gpupool.scheduler.capacity import CapacityIndex
from gpupool.scheduler.placement import find_placement, shape_of
from gpupool.scheduler.types import RunningWorkload


@dataclass(frozen=True, slots=True)
class Relayout:
    """Cut GPU `gpu_index` (`gpu_uuid`) of `node` into `layout` for `for_workload`."""

    node: str
    gpu_index: int
    gpu_uuid: str
    layout: str
    for_workload: str
    reason: str


def plan_relayouts(
    nodes: Sequence[Node], running: Sequence[RunningWorkload], pending: Sequence[Workload]
) -> list[Relayout]:
    """The re-layouts that let waiting MIG requests run (see the module rules)."""
    wanted = [w for w in sorted(pending, key=lambda w: (w.submitted_at, w.id)) if w.request.mig]
    if not wanted:
        return []
    cap = CapacityIndex(tuple(nodes), tuple(running))
    waiting = [w for w in wanted if find_placement(cap, shape_of(w.request)) is None]
    if not waiting:
        return []
    held = {s.gpu_uuid for rw in running for s in rw.allocation.shares}
    asked = {w.request.mig for w in waiting}
    demand: dict[str, int] = {}
    for w in waiting:
        demand[w.request.mig or ""] = demand.get(w.request.mig or "", 0) + 1
    supply: dict[str, int] = {}
    used: set[str] = set()
    plans: list[Relayout] = []
    for w in waiting:
        profile = w.request.mig or ""
        if supply.get(profile, 0) >= demand[profile]:
            continue
        best: tuple[tuple[int, str, int], Node, int, str, int] | None = None
        for n in nodes:
            if not n.schedulable or n.cpu_milli < w.request.cpu_milli:
                continue
            if n.memory_mib < w.request.memory_mib:
                continue
            for g in n.gpus:
                if g.sharing is not SharingMode.MIG or g.health is not GPUHealth.HEALTHY:
                    continue
                if g.uuid in held or g.uuid in used:
                    continue
                if w.request.gpu_model not in (None, g.model):
                    continue
                model = model_for(g.model, g.memory_mib)
                p = model.profile(profile) if model is not None else None
                if p is None:
                    continue
                current = instances_of(g.model, g.memory_mib, g.mig_layout or "")
                if any(i[0] == profile for i in current):
                    continue  # its instances of that profile are held or will free
                serves_others = any(i[0] in asked for i in current)
                key = (int(serves_others), n.name, g.index)
                if best is None or key < best[0]:
                    best = (key, n, g.index, g.uuid, p.max_count)
        if best is None:
            continue
        _, n, index, uuid, count = best
        used.add(uuid)
        supply[profile] = supply.get(profile, 0) + count
        plans.append(
            Relayout(
                n.name,
                index,
                uuid,
                f"all-{profile}",
                w.id,
                f"GPU {index} of {n.name} was idle and no layout had a free {profile}: "
                f"re-laid as all-{profile} for {w.id}",
            )
        )
    return plans
