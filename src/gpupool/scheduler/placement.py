"""Placement: filter -> score -> pick, on the capacity index.

Rules:
* every workload lands on one node, all or nothing (multi-GPU work too);
* whole GPUs: `count` whole free GPUs of one model on one node; the node with the *fewest*
  whole free GPUs that still suffice wins (best fit keeps big holes for big requests); on
  that node exclusive GPUs go before shared ones (shared ones are kept for fractions);
* fractions: one `shared` GPU with enough free milli and memory; the GPU with the least free
  milli, then least free memory, wins (best fit keeps whole GPUs whole);
* the node must also have the CPUs and memory asked for;
* CPU-only work may use a node held for blocked GPU work, as long as the CPUs and memory the
  holder asks for stay free there;
* a GPU model selector restricts the GPUs considered.

Shares record their enforcement: MIG GPUs `hardware`; other whole GPUs `policed` (bound by
CUDA_VISIBLE_DEVICES alone, which a process can ignore); fractions the configured level.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gpupool.domain import MILLI_PER_GPU, Allocation, Enforcement, Request, Share, SharingMode
from gpupool.scheduler.balance import (
    CANDIDATES,
    WHOLE_CANDIDATES,
    cpu_only_score,
)
from gpupool.scheduler.buckets import BucketIndex, probe_ranges, probe_starts
from gpupool.scheduler.capacity import CPU_ONLY, FRACTION, MIG, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.constraints import shared_enforcement_on, where_of
from gpupool.scheduler.fragmentation import least_fragmenting
from gpupool.scheduler.mig import find_mig, mig_on_node

#: (gpu id, milli, memory MiB) taken on one GPU
GpuTake = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Placement:
    node: int
    takes: tuple[GpuTake, ...]


def shape_of(request: Request, whole_gpus_only: bool = False) -> Shape:
    """Normalize a request. With `whole_gpus_only` a fraction becomes one whole GPU."""
    if request.engine is not None or request.node_labels or request.nodes > 1:
        return _shape_of(request, whole_gpus_only)._replace(where=where_of(request))
    return _shape_of(request, whole_gpus_only)


def _shape_of(request: Request, whole_gpus_only: bool) -> Shape:
    cpu, mem, model = request.cpu_milli, request.memory_mib, request.gpu_model
    if request.mig:
        return Shape(MIG, 0, request.total_gpu_milli, 0, model, cpu, mem, request.mig)
    if request.nodes > 1:  # a gang: gpupool.scheduler.gangs places it
        per = request.gpus_per_node
        return Shape(WHOLE, per, 0, request.gpu_memory_mib, model, cpu, mem, nodes=request.nodes)
    if request.gpus:
        return Shape(WHOLE, request.gpus, 0, request.gpu_memory_mib, model, cpu, mem)
    if request.gpu_milli:
        if whole_gpus_only:
            return Shape(WHOLE, 1, 0, request.gpu_memory_mib, model, cpu, mem)
        return Shape(FRACTION, 0, request.gpu_milli, request.gpu_memory_mib, model, cpu, mem)
    return Shape(CPU_ONLY, 0, 0, 0, None, cpu, mem)


def share_memory(cap: CapacityIndex, g: int, shape: Shape) -> int:
    """Memory a fractional share gets on GPU `g` (proportional to milli when not asked)."""
    if shape.gpu_memory_mib:
        return shape.gpu_memory_mib
    return cap.gpu_total_mem[g] * shape.milli // MILLI_PER_GPU


# -- per node (also used by preemption with hypothetical freed resources) -------------------


def place_on_node(
    cap: CapacityIndex,
    n: int,
    shape: Shape,
    freed_cpu: int = 0,
    freed_mem: int = 0,
    freed_gpu: dict[int, tuple[int, int]] | None = None,
) -> Placement | None:
    """Fit `shape` on node `n` as if `freed_*` were free too; ignores holds. None if no fit
    (also where `shape.where` leaves `n` out: gpupool.scheduler.constraints)."""
    if not cap.node_ready[n]:
        return None
    if shape.where is not None and not cap.where_mask(shape.where)[n]:
        return None
    if cap.free_cpu[n] + freed_cpu < shape.cpu_milli:
        return None
    if cap.free_mem[n] + freed_mem < shape.memory_mib:
        return None
    if shape.kind == CPU_ONLY:
        return Placement(n, ())
    if shape.kind == WHOLE:
        return _whole_on_node(cap, n, shape, freed_gpu or _NOTHING)
    if shape.kind == MIG:
        take = mig_on_node(cap, n, shape, freed_gpu or _NOTHING)
        return None if take is None else Placement(n, (take,))
    p = _fraction_on_node(cap, n, shape, freed_gpu or _NOTHING)
    if p is None and cap.node_mig[n]:  # the smallest MIG instance that holds the fraction
        take = mig_on_node(cap, n, shape, freed_gpu or _NOTHING)
        return None if take is None else Placement(n, (take,))
    return p


_NOTHING: dict[int, tuple[int, int]] = {}
_ZERO = (0, 0)


def _whole_on_node(
    cap: CapacityIndex, n: int, shape: Shape, freed: dict[int, tuple[int, int]]
) -> Placement | None:
    """`count` whole GPUs of one model; exclusive (and MIG) GPUs before shared ones."""
    model = shape.model
    need_mem = shape.gpu_memory_mib
    ok, gmodel, shared = cap.gpu_ok, cap.gpu_model, cap.gpu_shared
    free_milli, free_gmem, total = cap.free_milli, cap.free_gmem, cap.gpu_total_mem
    unshared_ids: list[int] = []
    shared_ids: list[int] = []
    # no model census below (a model asked for, or a node of one model): the first `count`
    # exclusive GPUs, once found, are the pick
    one = model is not None or len(cap.node_models[n]) == 1
    count = shape.count
    if not freed:  # (placement proper; preemption asks with resources freed)
        for g in cap.node_gpus[n]:
            if not ok[g] or (model is not None and gmodel[g] != model):
                continue
            if free_milli[g] >= MILLI_PER_GPU and free_gmem[g] >= total[g] >= need_mem:
                if shared[g]:
                    shared_ids.append(g)
                else:
                    unshared_ids.append(g)
                    if one and len(unshared_ids) == count:
                        break
    else:
        for g in cap.node_gpus[n]:
            if not ok[g] or (model is not None and gmodel[g] != model):
                continue
            fm, fg = freed.get(g, _ZERO)
            if free_milli[g] + fm >= MILLI_PER_GPU and free_gmem[g] + fg >= total[g] >= need_mem:
                (shared_ids if shared[g] else unshared_ids).append(g)
    if not one and len({gmodel[g] for g in unshared_ids + shared_ids}) > 1:
        # all GPUs of one request share a model: the model with the fewest that suffice
        best = None
        for m in sorted({gmodel[g] for g in unshared_ids + shared_ids}):
            picks = [g for g in unshared_ids if gmodel[g] == m]
            picks += [g for g in shared_ids if gmodel[g] == m]
            if len(picks) >= shape.count and (best is None or len(picks) < len(best)):
                best = picks
        if best is None:
            return None
        picks = best
    else:
        picks = unshared_ids + shared_ids
    if len(picks) < shape.count:
        return None
    return Placement(n, tuple((g, MILLI_PER_GPU, total[g]) for g in picks[: shape.count]))


def _fraction_on_node(
    cap: CapacityIndex, n: int, shape: Shape, freed: dict[int, tuple[int, int]]
) -> Placement | None:
    """One shared GPU: the least free milli, then the least free memory, that suffices."""
    best: tuple[int, int, int, int] | None = None
    for g in cap.node_gpus[n]:
        if not cap.gpu_ok[g] or not cap.gpu_shared[g]:
            continue
        if shape.model is not None and cap.gpu_model[g] != shape.model:
            continue
        fm, fg = freed.get(g, _ZERO)
        milli = cap.free_milli[g] + fm
        gmem = cap.free_gmem[g] + fg
        need = share_memory(cap, g, shape)
        if milli >= shape.milli and gmem >= need:
            cand = (milli, gmem, cap.gpu_index[g], g)
            if best is None or cand < best:
                best = cand
    if best is None:
        return None
    g = best[3]
    return Placement(n, ((g, shape.milli, share_memory(cap, g, shape)),))


# -- through the indexes ---------------------------------------------------------------------


def find_placement(cap: CapacityIndex, shape: Shape) -> Placement | None:
    """The best placement for `shape` on usable (ready, not held) nodes, or None.

    Whole GPUs are looked for first among non-shared GPUs, then among all of them. Work
    constrained to some nodes is placed among those (`find_pinned`)."""
    if shape.where is not None:
        if not cap.unrestricted(shape.where):
            return find_pinned(cap, shape)
        shape = shape._replace(where=None)
    if shape.kind == CPU_ONLY:
        return _find_cpu_only(cap, shape)
    if shape.kind == WHOLE:
        return _find(cap, shape, cap.whole_unshared) or _find(cap, shape, cap.whole)
    if shape.kind == MIG:
        return _found_mig(cap, shape)
    return _find(cap, shape, cap.frac) or _found_mig(cap, shape)


def _found_mig(cap: CapacityIndex, shape: Shape) -> Placement | None:
    hit = find_mig(cap, shape)
    return None if hit is None else Placement(hit[0], (hit[1],))


def _find(cap: CapacityIndex, shape: Shape, indexes: dict) -> Placement | None:
    """Per model, the best node (whole) or GPU (fraction) from the index; the best of those."""
    models = [shape.model] if shape.model is not None else cap.models
    best: tuple | None = None  # (key, item, shape with its model)
    mix = cap.mix.active(cap)
    if mix:  # CPUs or memory can strand GPUs here: gpupool.scheduler.fragmentation
        return _least_fragmenting(cap, shape, indexes, models, mix)
    for model in models:
        idx = indexes.get(model)
        if idx is None:
            continue
        hit: tuple[int, Any] | None
        # a later model wins only with a smaller key, or the same key and a lower id
        stop = None if best is None else best[0]
        if shape.kind == WHOLE:
            mshape = shape if shape.model else _with_model(shape, model)
            hit = _spread_whole(cap, idx, mshape, stop)
        else:
            mshape = shape
            hit = _spread_fraction(cap, idx, shape, stop)
        if hit is not None:
            item, key = hit
            if best is None or (key, item) < (best[0], best[1]):
                best = (key, item, mshape)
    if best is None:
        return None
    _, item, mshape = best
    if shape.kind == WHOLE:
        # = place_on_node(cap, item, mshape): a node in the index is ready and not held, and
        # `_spread_whole` found the CPUs and memory there; only the GPUs are left to pick
        return _whole_on_node(cap, item, mshape, _NOTHING)
    mem = share_memory(cap, item, shape)
    return Placement(cap.gpu_node[item], ((item, shape.milli, mem),))


def _least_fragmenting(
    cap: CapacityIndex, shape: Shape, indexes: dict, models: list[str], mix: tuple
) -> Placement | None:
    """Per model, the candidate that grows fragmentation least (then fits tightest, then is
    best balanced: `fragmentation.least_fragmenting`); the least of those."""
    cpu, mem = shape.cpu_milli, shape.memory_mib
    free_cpu, free_mem = cap.free_cpu, cap.free_mem
    best: tuple | None = None  # (growth, key, item, shape with its model)
    for model in models:
        idx = indexes.get(model)
        if idx is None:
            continue
        mshape = shape if shape.kind != WHOLE or shape.model else _with_model(shape, model)

        def fits(n: int, s: Shape = mshape) -> bool:
            if free_cpu[n] < cpu or free_mem[n] < mem:
                return False
            return not s.gpu_memory_mib or s.kind != WHOLE or place_on_node(cap, n, s) is not None

        hit = least_fragmenting(cap, mshape, idx, mix, fits, cap.mix.memo)
        if hit is not None and (best is None or hit < best[:3]):
            best = (*hit, mshape)
    if best is None:
        return None
    _, _, item, mshape = best
    if shape.kind == WHOLE:
        return place_on_node(cap, item, mshape)
    return Placement(cap.gpu_node[item], ((item, shape.milli, share_memory(cap, item, shape)),))


def _spread_whole(
    cap: CapacityIndex, idx: BucketIndex, s: Shape, stop: int | None = None
) -> tuple[int, int] | None:
    """`BucketIndex.find_spread` over nodes by whole free GPUs, from `s.count` up to `stop`
    (None: no bound): a node passes if it has the CPUs and memory (and, with
    `gpu_memory_mib`, GPUs that big); the score is `balance.whole_imbalance` with the whole
    free GPUs left. Written out in one loop (no call per probed node): the same answer, for
    a fraction of the cost. A large bucket's probes start from the item at each probe's
    first rank, read at once (`probe_starts`); the rest of a probe's range is looked at only
    where that item does not pass."""
    count, cpu, mem = s.count, s.cpu_milli, s.memory_mib
    free_cpu, free_mem = cap.free_cpu, cap.free_mem
    ctot, mtot, node_gpus = cap.cpu_total, cap.mem_total, cap.node_gpus
    big = s.gpu_memory_mib > 0
    limit = WHOLE_CANDIDATES
    for key, live in idx.buckets_from(count):
        if stop is not None and key > stop:
            return None
        left = key - count
        size = len(live)
        best_n = -1
        best_sc = 0.0
        every = size <= limit
        cands = live if every else probe_starts(size, limit)(live)
        for j, n in enumerate(cands):
            if free_cpu[n] < cpu or free_mem[n] < mem or (big and place_on_node(cap, n, s) is None):
                if every:
                    continue
                start, end = probe_ranges(size, limit)[j]
                n = _first_passing(cap, live, start + 1, end, s)
                if n < 0:
                    continue
            gpus = len(node_gpus[n])
            if not gpus:
                sc = 0.0
            else:
                c = ctot[n]
                c_share = (free_cpu[n] - cpu) / c if c else 1.0
                m = mtot[n]
                m_share = (free_mem[n] - mem) / m if m else 1.0
                # = min(1.0, abs(left / gpus - min(c_share, m_share))), without calls
                d = left / gpus - (c_share if c_share < m_share else m_share)
                if d < 0:
                    d = -d
                sc = d if d < 1.0 else 1.0
            if best_n < 0 or sc < best_sc or (sc == best_sc and n < best_n):
                best_n, best_sc = n, sc
        if best_n >= 0:
            return best_n, key
        if not every:
            n = _first_passing(cap, live, 0, size, s)
            if n >= 0:
                return n, key
    return None


def _first_passing(cap: CapacityIndex, live: list[int], start: int, end: int, s: Shape) -> int:
    """The first node of `live[start:end]` that passes for `_spread_whole`, or -1."""
    free_cpu, free_mem = cap.free_cpu, cap.free_mem
    cpu, mem, big = s.cpu_milli, s.memory_mib, s.gpu_memory_mib > 0
    for r in range(start, end):
        n = live[r]
        fits = free_cpu[n] >= cpu and free_mem[n] >= mem
        if fits and (not big or place_on_node(cap, n, s) is not None):
            return n
    return -1


def _spread_fraction(
    cap: CapacityIndex, idx: BucketIndex, s: Shape, stop: Any = None
) -> tuple[int, tuple[int, int]] | None:
    """`BucketIndex.find_spread` over shared GPUs by (free milli, free memory), from
    (`s.milli`, `s.gpu_memory_mib`) up to `stop` (None: no bound), buckets with less memory
    than asked skipped: a GPU passes if its node has the CPUs and memory and it has the
    share's memory; the score is `balance.fraction_score` of the first GPU that passed on its
    node, taken as the node's (plus one for that GPU being whole), less one for the GPU being
    whole. In one loop, as `_spread_whole`.

    A score is the node's whole free GPUs left (an integer) plus an imbalance in [0, 1], so it
    is never below that integer (IEEE rounding is monotone): a GPU whose integer is not below
    the best score of its bucket so far cannot win (a tie goes to the lower id, probed first)
    and its imbalance is not worked out."""
    milli, cpu, mem, lo_mem = s.milli, s.cpu_milli, s.memory_mib, s.gpu_memory_mib
    free_cpu, free_mem, free_gmem = cap.free_cpu, cap.free_mem, cap.free_gmem
    free_milli, total = cap.free_milli, cap.gpu_total_mem
    gpu_node, node_whole, node_milli = cap.gpu_node, cap.node_whole_free, cap.node_free_milli
    node_gpus, ctot, mtot = cap.node_gpus, cap.cpu_total, cap.mem_total
    limit = CANDIDATES
    first: dict[int, int] = {}  # node -> whole-freeness (1/0) of its first GPU that passed
    bases: dict[int, float] = {}  # node -> its score plus that GPU's whole-freeness
    for key, live in idx.buckets_from((milli, lo_mem)):
        if stop is not None and key > stop:
            return None
        if key[1] < lo_mem:
            continue
        size = len(live)
        best_g = -1
        best_sc = 0.0
        every = size <= limit
        ranges = ((0, size),) if every else probe_ranges(size, limit)
        for start, end in ranges:
            for r in range(start, end):
                g = live[r]
                n = gpu_node[g]
                if free_cpu[n] < cpu or free_mem[n] < mem:
                    continue
                need = lo_mem if lo_mem else total[g] * milli // MILLI_PER_GPU
                if free_gmem[g] < need:
                    continue
                whole = 1 if free_milli[g] >= MILLI_PER_GPU and free_gmem[g] >= total[g] else 0
                w1 = first.get(n)
                if w1 is None:
                    first[n] = w1 = whole
                if best_g < 0 or node_whole[n] - whole < best_sc:
                    base = bases.get(n)
                    if base is None:
                        # = fraction_score(cap, g1, ...) + w1 for that first GPU g1, without calls
                        gpus = len(node_gpus[n])
                        if gpus:
                            g_share = (node_milli[n] - milli) / (gpus * MILLI_PER_GPU)
                            c = ctot[n]
                            c_share = (free_cpu[n] - cpu) / c if c else 1.0
                            m = mtot[n]
                            m_share = (free_mem[n] - mem) / m if m else 1.0
                            d = g_share - (m_share if m_share < c_share else c_share)
                            if d < 0:
                                d = -d
                            imb = d if d < 1.0 else 1.0
                        else:
                            imb = 0.0
                        base = bases[n] = (node_whole[n] - w1 + imb) + w1
                    sc = base - whole
                    if best_g < 0 or sc < best_sc or (sc == best_sc and g < best_g):
                        best_g, best_sc = g, sc
                if not every:
                    break
        if best_g >= 0:
            return best_g, key
        if not every:
            for g in live:
                n = gpu_node[g]
                if free_cpu[n] < cpu or free_mem[n] < mem:
                    continue
                need = lo_mem if lo_mem else total[g] * milli // MILLI_PER_GPU
                if free_gmem[g] >= need:
                    return g, key
    return None


@lru_cache(maxsize=4096)
def _with_model(shape: Shape, model: str) -> Shape:
    return shape._replace(model=model)


def _find_cpu_only(cap: CapacityIndex, shape: Shape) -> Placement | None:
    """First fit, nodes without GPUs first (keeps GPU hosts' CPUs for GPU work). A node held
    for blocked GPU work is used only if it keeps the CPUs and memory its holder asks for
    free: CPU-only work never waits for GPU reservations, but never takes CPUs or memory
    the reserved work needs."""
    best: tuple[float, int] | None = None
    held = cap.node_held
    for n in range(len(cap.nodes)):
        if not cap.node_ready[n] or not cap.node_fits_host(n, shape):
            continue
        if held[n] and not cap.fits_beside_hold(n, shape):
            continue
        if not cap.node_gpus[n]:
            return Placement(n, ())
        cand = (cpu_only_score(cap, n, shape.cpu_milli, shape.memory_mib), n)
        if best is None or cand < best:
            best = cand
    return None if best is None else Placement(best[1], ())


@lru_cache(maxsize=1 << 16)
def _share(
    node: str,
    gpu_index: int,
    gpu_uuid: str,
    milli: int,
    memory_mib: int,
    enforcement: Enforcement,
    mig: tuple[str, int] | None,
) -> Share:
    """The Share these values make (immutable, so equal ones are one object: admissions
    build the same few per GPU again and again)."""
    return Share(
        node=node,
        gpu_index=gpu_index,
        gpu_uuid=gpu_uuid,
        milli=milli,
        memory_mib=memory_mib,
        enforcement=enforcement,
        mig_profile=None if mig is None else mig[0],
        mig_start=None if mig is None else mig[1],
    )


def to_allocation(
    cap: CapacityIndex,
    workload_id: str,
    placement: Placement,
    shape: Shape,
    now: float,
    shared_enforcement: Enforcement,
) -> Allocation:
    """The allocation `placement` gives `workload_id`, since `now` (its shares record their
    enforcement: see the module's docstring)."""
    node = cap.nodes[placement.node]
    shared = shared_enforcement
    if shared_enforcement is Enforcement.MPS and not cap.node_mps[placement.node]:
        shared = shared_enforcement_on(node.label_map, shared_enforcement)
    name, index, uuid, sharing, mig = (
        node.name,
        cap.gpu_index,
        cap.gpu_uuid,
        cap.gpu_sharing,
        cap.gpu_mig,
    )
    shares = []
    for g, milli, mem in placement.takes:
        # what keeps the share to its GPU: the GPU itself only for MIG; a whole GPU bound by
        # CUDA_VISIBLE_DEVICES alone is watched (`policed`), not enforced; fractions get the
        # configured level (`mps` or `policed`)
        if sharing[g] is SharingMode.MIG:
            how = Enforcement.HARDWARE
        else:
            how = Enforcement.POLICED if milli == MILLI_PER_GPU else shared
        shares.append(_share(name, index[g], uuid[g], milli, mem, how, mig[g]))
    return Allocation(workload_id, name, tuple(shares), now, shape.cpu_milli, shape.memory_mib)


def find_pinned(cap: CapacityIndex, shape: Shape) -> Placement | None:
    """The placement of constrained `shape` on the usable nodes it may use, or None.

    Whole GPUs: the allowed node in the lowest bucket of the whole-GPU index (fewest whole
    free GPUs that suffice; exclusive GPUs first), lowest id among equals; fractions: the
    allowed shared GPU with the least free milli, then memory; otherwise (MIG, CPU only, or
    nothing found in the indexes for a fraction) the first allowed usable node in id order
    where `place_on_node` fits it (it checks the constraint too)."""
    allowed = cap.where_mask(shape.where)
    models = [shape.model] if shape.model is not None else cap.models
    if shape.kind == WHOLE:
        for indexes in (cap.whole_unshared, cap.whole):
            best: tuple | None = None
            for m in models:
                idx = indexes.get(m)
                if idx is None:
                    continue
                one = shape._replace(model=m)
                for key, live in idx.buckets_from(shape.count):
                    hit = next(
                        (
                            p
                            for n in live
                            if allowed[n] and (p := place_on_node(cap, n, one)) is not None
                        ),
                        None,
                    )
                    if hit is not None:
                        if best is None or (key, hit.node) < best[0]:
                            best = ((key, hit.node), hit)
                        break
            if best is not None:
                return best[1]
        return None
    if shape.kind == FRACTION:
        best = None
        for m in models:
            idx = cap.frac.get(m)
            if idx is None:
                continue
            for key, live in idx.buckets_from((shape.milli, shape.gpu_memory_mib)):
                if key[1] < shape.gpu_memory_mib:
                    continue
                found = None
                for g in live:
                    n = cap.gpu_node[g]
                    if allowed[n] and cap.node_fits_host(n, shape):
                        need = shape.gpu_memory_mib or cap.gpu_total_mem[g] * shape.milli // 1000
                        if cap.free_gmem[g] >= need:
                            found = (key, g, n, need)
                            break
                if found is not None:
                    if best is None or found[:2] < best[:2]:
                        best = found
                    break
        if best is not None:
            return Placement(best[2], ((best[1], shape.milli, best[3]),))
    fallback = None
    for n in cap.where_nodes(shape.where):
        if not cap.node_ready[n]:
            continue
        if cap.node_held[n] and not (shape.kind == CPU_ONLY and cap.fits_beside_hold(n, shape)):
            continue
        p = place_on_node(cap, n, shape)
        if p is None:
            continue
        if shape.kind != CPU_ONLY or not cap.node_gpus[n]:
            return p
        fallback = fallback or p
    return fallback
