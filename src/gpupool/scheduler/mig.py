"""MIG placement: instances of the layouts of GPUs in `mig` mode, and why none is free.

A `mig` GPU with a layout (gpupool.domain.mig) is filed in the capacity index as one entry per
instance of its layout (`CapacityIndex.node_mig`, `gpu_mig`); the physical GPU itself then has
no milli to give, so it is never handed out whole while cut. An instance is free or held
whole: its free milli is its full milli or less.

* A MIG request (`Shape.mig`) takes one free instance of exactly that profile, on a GPU of the
  asked model: the GPU with the fewest free instances wins (keeps emptier GPUs for re-layout),
  then the lowest GPU index and start.
* A fraction that no `shared` GPU holds may take the smallest free instance (by compute, then
  memory) whose compute share and memory are at least what it asks for.
"""

from __future__ import annotations

from gpupool.domain.mig import model_for, profile_family, starts_text
from gpupool.scheduler.capacity import FRACTION, MIG, CapacityIndex, Shape

_ZERO = (0, 0)


def _free(cap: CapacityIndex, g: int, freed: dict[int, tuple[int, int]]) -> bool:
    fm = freed.get(g, _ZERO)[0] if freed else 0
    return cap.free_milli[g] + fm >= cap.gpu_milli_total[g]


def _free_count(cap: CapacityIndex, n: int, gpu_index: int) -> int:
    return sum(
        1
        for g in cap.node_mig[n]
        if cap.gpu_index[g] == gpu_index and cap.free_milli[g] >= cap.gpu_milli_total[g]
    )


def mig_on_node(
    cap: CapacityIndex, n: int, shape: Shape, freed: dict[int, tuple[int, int]]
) -> tuple[int, int, int] | None:
    """(instance id, milli, memory) of the best free instance for `shape` on node `n`, or
    None. Ignores host resources and holds (the caller checks those)."""
    best: tuple[tuple, int] | None = None
    for g in cap.node_mig[n]:
        if not cap.gpu_ok[g] or (shape.model is not None and cap.gpu_model[g] != shape.model):
            continue
        if not _free(cap, g, freed):
            continue
        profile, start = cap.gpu_mig[g]  # type: ignore[misc]
        if shape.kind == MIG:
            if profile != shape.mig:
                continue
            key: tuple = (_free_count(cap, n, cap.gpu_index[g]), cap.gpu_index[g], start)
        else:  # a fraction: the smallest instance that holds it
            if cap.gpu_milli_total[g] < shape.milli:
                continue
            if cap.gpu_total_mem[g] < shape.gpu_memory_mib:
                continue
            key = (cap.gpu_milli_total[g], cap.gpu_total_mem[g], cap.gpu_index[g], start)
        if best is None or key < best[0]:
            best = (key, g)
    if best is None:
        return None
    g = best[1]
    return (g, cap.gpu_milli_total[g], cap.gpu_total_mem[g])


def find_mig(cap: CapacityIndex, shape: Shape) -> tuple[int, tuple[int, int, int]] | None:
    """(node, take) of the best free instance for `shape` on usable (ready, not held) nodes
    that have its CPUs and memory, or None. First node in id order with a fit wins among
    equals; MIG nodes are few, so this scans them."""
    best: tuple[tuple, int, tuple[int, int, int]] | None = None
    for n in cap.mig_nodes:
        if not cap.node_ready[n] or cap.node_held[n]:
            continue
        if not cap.node_fits_host(n, shape):
            continue
        take = mig_on_node(cap, n, shape, {})
        if take is None:
            continue
        g = take[0]
        if shape.kind == FRACTION:
            key: tuple = (take[1], take[2], n)
        else:
            key = (_free_count(cap, n, cap.gpu_index[g]), n)
        if best is None or key < best[0]:
            best = (key, n, take)
    return None if best is None else (best[1], best[2])


def mig_no_fit_reason(cap: CapacityIndex, shape: Shape) -> str:
    """Why no instance of `shape.mig` is free: every instance held, no layout has one, or the
    free slices of a GPU sit at starts the profile cannot take."""
    want = shape.mig or ""
    fam = profile_family(want)
    seen_profile = False
    details: list[str] = []
    for n in cap.mig_nodes:
        by_gpu: dict[int, list[int]] = {}
        for g in cap.node_mig[n]:
            if shape.model is None or cap.gpu_model[g] == shape.model:
                by_gpu.setdefault(cap.gpu_index[g], []).append(g)
        for index, gs in sorted(by_gpu.items()):
            if any(cap.gpu_mig[g][0] == want for g in gs):  # type: ignore[index]
                seen_profile = True
            free = [g for g in gs if cap.free_milli[g] >= cap.gpu_milli_total[g]]
            if not free:
                continue
            slices: dict[str, int] = {}
            for g in free:
                f = profile_family(cap.gpu_mig[g][0])  # type: ignore[index]
                slices[f] = slices.get(f, 0) + int(f[:-1])
            have = " and ".join(
                f"{_count(k)} free {f} slice{'s' if k != 1 else ''}"
                for f, k in sorted(slices.items())
            )
            node = cap.nodes[n]
            gpu = node.gpu(index)
            model = model_for(gpu.model, gpu.memory_mib)
            p = model.profile(want) if model is not None else None
            need = f"a {fam} needs {starts_text(p)}" if p is not None else f"it has no {want}"
            details.append(
                f"GPU {index} of {node.name} has {have}, but {need} (layout {gpu.mig_layout})"
            )
    if details:
        more = f" (and {len(details) - 2} more)" if len(details) > 2 else ""
        return f"no free {want}: " + "; ".join(details[:2]) + more
    if seen_profile:
        return f"no free {want}: every {want} instance is in use"
    return (
        f"no free {want}: no GPU's MIG layout has a {want} instance; an admin can set one "
        f"(gpupool gpu mig-layout NODE:INDEX all-{want})"
    )


def _count(k: int) -> str:
    words = ("no", "one", "two", "three", "four", "five", "six", "seven")
    return words[k] if k < len(words) else str(k)
