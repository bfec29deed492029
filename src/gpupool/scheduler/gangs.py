"""Gangs: multi-node requests (`Request.nodes` > 1), admitted all or nothing. Pure: no I/O.

Rules:
* a gang of N nodes x G GPUs lands on N distinct usable (ready, not held) nodes, G whole GPUs
  of one model on each (the same model on every node), plus its CPUs and memory per node;
  all N are taken in one admission, or none;
* engines (gpupool.scheduler.constraints): only nodes whose engine runs multi-node work, and
  all N on one engine (nodes without an engine label go with any); engines are tried like
  models, the closer domain winning, then the engine first by name;
* topology: nodes close together are preferred. `topology_keys` are node label keys, closest
  first (e.g. `nvidia.com/gpu.clique`, a switch, a rack, `topology.kubernetes.io/zone`): for
  the closest key under which some label value has N nodes that fit now, the gang goes into
  the smallest such group (best fit keeps large domains whole for large gangs); nodes
  without the label are never grouped under that key; if no key groups N fitting nodes, any
  N fitting nodes are taken. Within the chosen nodes, best fit: fewest whole free GPUs first;
* a gang that does not fit reserves N nodes (`gang_reservation`): the nodes where it is
  closest to fitting, in the same topology order. GPU work is not placed on them, except work
  whose max runtime ends before the gang's expected start (`due`, from the max runtimes of
  what runs there; None: unknown, then nothing backfills there);
* the allocation is one `Allocation` spanning the nodes (each share names its node; `node`
  is rank 0): the gang is stopped, preempted and requeued as one workload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpupool.domain import MILLI_PER_GPU, Allocation, Enforcement
from gpupool.scheduler.capacity import WHOLE, CapacityIndex, Shape
from gpupool.scheduler.constraints import engine_groups, where_text
from gpupool.scheduler.placement import Placement, place_on_node, to_allocation
from gpupool.scheduler.reservations import could_ever_fit
from gpupool.scheduler.types import DEFAULT_TOPOLOGY_KEYS


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Where each member of a gang goes, in rank order, and the topology domain they share
    (`key=value`, or None when they share none of the keys)."""

    members: tuple[Placement, ...]
    domain: str | None = None


def per_node(shape: Shape) -> Shape:
    """What a gang asks for on each of its nodes."""
    return shape._replace(nodes=1)


def _models(cap: CapacityIndex, shape: Shape) -> list[str]:
    return [shape.model] if shape.model is not None else list(cap.models)


def pick_nodes(
    cap: CapacityIndex,
    candidates: list[int],
    count: int,
    keys: Iterable[str],
    fullness: Callable[[int], int],
    group_rank: Callable[[list[int]], tuple] | None = None,
) -> tuple[list[int], str | None] | None:
    """`count` of `candidates` (node ids), close by `keys` where possible; `fullness(n)` orders
    nodes inside the chosen group (smaller first); among the groups of the closest key that
    have `count` candidates, `group_rank(members)` picks (smallest first; default: the
    smallest group). (nodes, domain) or None if too few."""
    if len(candidates) < count:
        return None
    for key in keys:
        groups: dict[str, list[int]] = {}
        for n in candidates:
            v = cap.nodes[n].label_map.get(key)
            if v is not None:
                groups.setdefault(v, []).append(n)
        rank = group_rank or (lambda ns: (len(ns),))
        fitting = [(rank(ns), v, ns) for v, ns in groups.items() if len(ns) >= count]
        if fitting:
            _, v, ns = min(fitting)
            chosen = sorted(ns, key=lambda n: (fullness(n), n))[:count]
            return chosen, f"{key}={v}"
    return sorted(candidates, key=lambda n: (fullness(n), n))[:count], None


def _whole_free(cap: CapacityIndex, n: int, model: str) -> int:
    return sum(
        1
        for g in cap.node_gpus[n]
        if cap.gpu_ok[g] and cap.gpu_model[g] == model and cap.is_whole_free(g)
    )


def find_gang(
    cap: CapacityIndex,
    shape: Shape,
    keys: Iterable[str] = DEFAULT_TOPOLOGY_KEYS,
    allowed: Callable[[int], bool] | None = None,
) -> GangPlacement | None:
    """The best placement of gang `shape` on usable nodes (or also on the nodes `allowed`
    says yes to although they are held), or None if fewer than `shape.nodes` nodes fit now.
    Models are tried in name order; a closer domain wins over an earlier model."""
    keys = tuple(keys)
    best: tuple[tuple, GangPlacement] | None = None
    for model in _models(cap, shape):
        one = per_node(shape)._replace(model=model)
        fits: dict[int, Placement] = {}
        for n in range(len(cap.nodes)):
            if not cap.node_ready[n]:
                continue
            if cap.node_held[n] and (allowed is None or not allowed(n)):
                continue
            p = place_on_node(cap, n, one)
            if p is not None:
                fits[n] = p

        def whole_free(n: int, m: str = model) -> int:
            return _whole_free(cap, n, m)

        for gi, group in enumerate(engine_groups(cap.node_engine, list(fits))):
            picked = pick_nodes(cap, group, shape.nodes, keys, whole_free)
            if picked is None:
                continue
            nodes, domain = picked
            level = keys.index(domain.split("=", 1)[0]) if domain else len(keys)
            gp = GangPlacement(tuple(fits[n] for n in nodes), domain)
            rank = (level, model, gi)
            if best is None or rank < best[0]:
                best = (rank, gp)
    return None if best is None else best[1]


def gang_allocation(
    cap: CapacityIndex,
    workload_id: str,
    gp: GangPlacement,
    shape: Shape,
    now: float,
    shared_enforcement: Enforcement,
) -> Allocation:
    """One Allocation spanning the gang's nodes; rank 0's node is `node`."""
    one = per_node(shape)
    parts = [to_allocation(cap, workload_id, p, one, now, shared_enforcement) for p in gp.members]
    return Allocation(
        workload_id=workload_id,
        node=parts[0].node,
        shares=tuple(s for a in parts for s in a.shares),
        since=now,
        cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib,
    )


def gang_reservation(
    cap: CapacityIndex, shape: Shape, keys: Iterable[str] = DEFAULT_TOPOLOGY_KEYS
) -> list[int] | None:
    """The `shape.nodes` usable nodes where gang `shape` is closest to fitting (each could
    hold its part when empty), close by `keys` where possible; None if too few could."""
    keys = tuple(keys)
    best: tuple[tuple, list[int]] | None = None
    for model in _models(cap, shape):
        one = per_node(shape)._replace(model=model)
        cands = [
            n
            for n in range(len(cap.nodes))
            if cap.node_ready[n] and not cap.node_held[n] and could_ever_fit(cap, n, one)
        ]

        def free_of(n: int, m: str = model, per: int = one.count) -> int:
            return min(_whole_free(cap, n, m), per)

        def closest(ns: list[int]) -> tuple:
            best = sorted((free_of(n) for n in ns), reverse=True)[: shape.nodes]
            return (-sum(best), len(ns))

        for gi, group in enumerate(engine_groups(cap.node_engine, cands)):
            picked = pick_nodes(cap, group, shape.nodes, keys, lambda n: -free_of(n), closest)
            if picked is None:
                continue
            nodes, domain = picked
            level = keys.index(domain.split("=", 1)[0]) if domain else len(keys)
            free = sum(min(_whole_free(cap, n, model), one.count) for n in nodes)
            rank = (level, -free, model, gi)
            if best is None or rank < best[0]:
                best = (rank, nodes)
    return None if best is None else best[1]


def gang_due(starts: list[float | None]) -> float | None:
    """When a gang holding nodes can start: the latest of its nodes' expected starts (None if
    any is unknown)."""
    if not starts or any(s is None for s in starts):
        return None
    return max(s for s in starts if s is not None)


def gang_reason(cap: CapacityIndex, shape: Shape) -> str:
    """'needs 4 nodes with 8 free H100 GPUs each; 2 have them now' (and how many more have
    the GPUs but not the CPUs or memory asked for, if any)."""
    one = per_node(shape)
    model = f"{shape.model} " if shape.model else ""
    gpus = f"{one.count} free {model}GPU{'s' if one.count != 1 else ''}"
    best = best_gpus = 0
    engines = cap.node_engine
    for m in _models(cap, shape):
        s = one._replace(model=m)
        bare = s._replace(cpu_milli=0, memory_mib=0)
        with_gpus: list[int] = []
        fit: set[int] = set()
        for n in range(len(cap.nodes)):
            if not cap.node_ready[n] or cap.node_held[n]:
                continue
            if place_on_node(cap, n, bare) is not None:
                with_gpus.append(n)
                if cap.node_fits_host(n, s):
                    fit.add(n)
        for group in engine_groups(engines, with_gpus):  # counted on one engine
            have = sum(1 for n in group if n in fit)
            best, best_gpus = max(best, have), max(best_gpus, len(group))
    verb = "has" if best == 1 else "have"
    several = len(set(engines) - {None}) > 1
    on = " on one engine" if several else ""
    text = f"needs {shape.nodes} nodes{on} with {gpus} each; {best} {verb} them now"
    if best_gpus > best:
        text += f" ({best_gpus - best} more without the CPUs or memory asked for)"
    if shape.where is not None and not cap.unrestricted(shape.where):
        text = f"{where_text(cap.nodes, shape.where)}; {text}"
    return text


def is_gang(shape: Shape) -> bool:
    return shape.kind == WHOLE and shape.nodes > 1


def gpus_text(shape: Shape) -> str:
    return f"{shape.nodes} x {shape.count} GPUs ({shape.gpu_milli // MILLI_PER_GPU} in all)"
