"""Placement: filter -> score -> pick, on the capacity index.

Rules:
* every workload lands on one node, all or nothing (multi-GPU work too);
* whole GPUs: `count` whole free GPUs of one model on one node; the node with the *fewest*
  whole free GPUs that still suffice wins (best fit keeps big holes for big requests); on
  that node exclusive GPUs go before shared ones (shared ones are kept for fractions);
* fractions: one `shared` GPU with enough free milli and memory; the GPU with the least free
  milli, then least free memory, wins (best fit keeps whole GPUs whole);
* the node must also have the CPUs and memory asked for;
* a GPU model selector restricts the GPUs considered.

Shares record their enforcement: whole GPUs `hardware`, fractions the configured level.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain import MILLI_PER_GPU, Allocation, Enforcement, Request, Share, SharingMode
from gpupool.scheduler.capacity import CPU_ONLY, FRACTION, WHOLE, CapacityIndex, Shape

#: (gpu id, milli, memory MiB) taken on one GPU
GpuTake = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Placement:
    node: int
    takes: tuple[GpuTake, ...]


def shape_of(request: Request, whole_gpus_only: bool = False) -> Shape:
    """Normalize a request. With `whole_gpus_only` a fraction becomes one whole GPU."""
    cpu, mem, model = request.cpu_milli, request.memory_mib, request.gpu_model
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
    """Fit `shape` on node `n` as if `freed_*` were free too; ignores holds. None if no fit."""
    if not cap.node_ready[n]:
        return None
    if cap.free_cpu[n] + freed_cpu < shape.cpu_milli:
        return None
    if cap.free_mem[n] + freed_mem < shape.memory_mib:
        return None
    freed_gpu = freed_gpu or {}
    if shape.kind == CPU_ONLY:
        return Placement(n, ())
    options: list[tuple[tuple[int, ...], int, int, int]] = []  # (score, g, milli, mem)
    for g in cap.node_gpus[n]:
        if not cap.gpu_ok[g] or (shape.model is not None and cap.gpu_model[g] != shape.model):
            continue
        fm, fg = freed_gpu.get(g, (0, 0))
        milli = cap.free_milli[g] + fm
        gmem = cap.free_gmem[g] + fg
        total = cap.gpu_total_mem[g]
        if shape.kind == WHOLE:
            if milli >= MILLI_PER_GPU and gmem >= total and total >= shape.gpu_memory_mib:
                shared = cap.gpu_sharing[g] is SharingMode.SHARED
                options.append(((int(shared), cap.gpu_index[g]), g, MILLI_PER_GPU, total))
        elif cap.gpu_sharing[g] is SharingMode.SHARED:
            need = share_memory(cap, g, shape)
            if milli >= shape.milli and gmem >= need:
                options.append(((milli, gmem, cap.gpu_index[g]), g, shape.milli, need))
    if shape.kind == WHOLE:
        if shape.model is None:
            # all GPUs of one request share a model: pick the model with the best fit
            by_model: dict[str, list] = {}
            for o in options:
                by_model.setdefault(cap.gpu_model[o[1]], []).append(o)
            fits = [v for _, v in sorted(by_model.items()) if len(v) >= shape.count]
            if not fits:
                return None
            options = min(fits, key=len)
        if len(options) < shape.count:
            return None
        options.sort()
        return Placement(n, tuple((g, m, mem) for _, g, m, mem in options[: shape.count]))
    if not options:
        return None
    _, g, m, mem = min(options)
    return Placement(n, ((g, m, mem),))


# -- through the indexes ---------------------------------------------------------------------


def find_placement(cap: CapacityIndex, shape: Shape) -> Placement | None:
    """The best placement for `shape` on usable (ready, not held) nodes, or None.

    Whole GPUs are looked for first among non-shared GPUs, then among all of them."""
    if shape.kind == CPU_ONLY:
        return _find_cpu_only(cap, shape)
    if shape.kind == WHOLE:
        return _find(cap, shape, cap.whole_unshared) or _find(cap, shape, cap.whole)
    return _find(cap, shape, cap.frac)


def _find(cap: CapacityIndex, shape: Shape, indexes: dict) -> Placement | None:
    models = [shape.model] if shape.model is not None else cap.models
    best: tuple[tuple, Placement] | None = None
    for model in models:
        if shape.kind == WHOLE:
            idx = indexes.get(model)
            if idx is None:
                continue
            mshape = shape if shape.model else _with_model(shape, model)

            def pred(n: int, s: Shape = mshape) -> bool:
                if not cap.node_fits_host(n, s):
                    return False
                return not s.gpu_memory_mib or place_on_node(cap, n, s) is not None

            hit = idx.find(shape.count, pred)
            if hit is None:
                continue
            n, key = hit
            cand = ((key, n), place_on_node(cap, n, mshape))
        else:
            idx = indexes.get(model)
            if idx is None:
                continue
            lo_mem = shape.gpu_memory_mib

            def gpred(g: int) -> bool:
                n = cap.gpu_node[g]
                if not cap.node_fits_host(n, shape):
                    return False
                return cap.free_gmem[g] >= share_memory(cap, g, shape)

            hit = idx.find((shape.milli, lo_mem), gpred, lambda k, lo=lo_mem: k[1] >= lo)
            if hit is None:
                continue
            g, key = hit
            mem = share_memory(cap, g, shape)
            cand = ((key, g), Placement(cap.gpu_node[g], ((g, shape.milli, mem),)))
        if cand[1] is not None and (best is None or cand[0] < best[0]):
            best = cand  # type: ignore[assignment]
    return None if best is None else best[1]


def _with_model(shape: Shape, model: str) -> Shape:
    return shape._replace(model=model)


def _find_cpu_only(cap: CapacityIndex, shape: Shape) -> Placement | None:
    """First fit, nodes without GPUs first (keeps GPU hosts' CPUs for GPU work)."""
    fallback = None
    for n in range(len(cap.nodes)):
        if not cap.node_ready[n] or cap.node_held[n] or not cap.node_fits_host(n, shape):
            continue
        if not cap.node_gpus[n]:
            return Placement(n, ())
        if fallback is None:
            fallback = n
    return None if fallback is None else Placement(fallback, ())


def to_allocation(
    cap: CapacityIndex,
    workload_id: str,
    placement: Placement,
    shape: Shape,
    now: float,
    shared_enforcement: Enforcement,
) -> Allocation:
    node = cap.nodes[placement.node]
    shares = tuple(
        Share(
            node=node.name,
            gpu_index=cap.gpu_index[g],
            gpu_uuid=cap.gpu_uuid[g],
            milli=milli,
            memory_mib=mem,
            enforcement=Enforcement.HARDWARE if milli == MILLI_PER_GPU else shared_enforcement,
        )
        for g, milli, mem in placement.takes
    )
    return Allocation(
        workload_id=workload_id,
        node=node.name,
        shares=shares,
        since=now,
        cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib,
    )
