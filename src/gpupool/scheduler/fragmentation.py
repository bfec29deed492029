"""Fragmentation-aware placement: the placement that leaves the most free GPU usable by the
work that typically runs here.

The *mix* (gpupool.scheduler.mix) is what runs now, by shape class, each weighted by the GPU
its work holds. A node's *fragmentation* for the mix is the free GPU (milli) its classes could
not use there, weighted: for one class, the free GPU less what it could take — whole GPUs in
multiples of its count, fractions on GPUs with at least its size free — and no more than the
node's free CPUs and memory allow at the class's CPUs and memory per GPU. A placement's score
is how much it grows the fragmentation of its node — for a fraction, plus how much it puts
its node's free GPU and free CPUs out of step (`out_of_step`: fractions ask for many CPUs per
GPU milli and strand GPUs only together); ties go to the tighter fit, then to the
better balanced node (placement.py's order without this; gpupool.scheduler.balance). (FGD,
USENIX ATC'23, showed the direction: score a placement by what it takes from the typical
work. The measure here also counts GPUs stranded by CPUs and memory, and weights classes by
GPUs, not tasks.)

Used only where CPUs or memory can strand GPUs (`ShapeMix.active`): where every node has at
least the CPUs and memory per GPU of the hungriest class, GPU best fit (placement.py) is what
this would pick, and the scoring is skipped at no cost. Candidates are bounded
(`CANDIDATES`, spread over the first buckets of the capacity index), so the cost per
placement is bounded too, and a node state's fragmentation is remembered while the mix is the
same (`ShapeMix.memo`). Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gpupool.domain import MILLI_PER_GPU
from gpupool.scheduler.balance import fraction_score, whole_imbalance
from gpupool.scheduler.buckets import BucketIndex, probe_ranges
from gpupool.scheduler.mix import MixClass

if TYPE_CHECKING:
    from gpupool.scheduler.capacity import CapacityIndex, Shape

#: what a fraction pays (`out_of_step`) per GPU of its node for the free GPU share it leaves
#: ahead of the free CPU or memory share, and for the other way round (CPUs left without
#: GPUs strand nothing but CPU-only work's room): chosen on `bench/packing.py`, 10 seeds of
#: each mix (bench/results/packing.md)
GPU_AHEAD = 2.0
CPU_AHEAD = 0.5
#: candidates scored per placement (nodes for whole GPUs, GPUs of distinct nodes for fractions)
CANDIDATES = 32
#: candidates taken from one bucket of the capacity index (spread over it)
PER_BUCKET = 8


def fragmentation(
    mix: tuple[MixClass, ...],
    free: list[int],
    whole: int,
    cpu: int,
    mem: int,
) -> float:
    """The free GPU milli that `mix` could not use on a node with GPUs' free milli `free`,
    `whole` whole free GPUs, `cpu` free CPU milli and `mem` free memory MiB (weighted)."""
    total = 0
    for f in free:
        if f > 0:
            total += f
    if total <= 0:
        return 0.0
    out = 0.0
    for weight, count, size, cpu_per, mem_per in mix:
        if count:
            usable = float(whole - whole % count) * MILLI_PER_GPU if whole >= count else 0.0
        else:
            usable = 0.0
            for f in free:
                if f >= size:
                    usable += f
        if cpu < cpu_per * usable:
            usable = cpu / cpu_per
        if mem < mem_per * usable:
            usable = mem / mem_per
        if usable < 0:
            usable = 0.0
        out += weight * (total - usable)
    return out


#: node states whose fragmentation one mix remembers (`ShapeMix.memo`) before starting over
MEMO_LIMIT = 1 << 16


def _frag(
    memo: dict, mix: tuple[MixClass, ...], free: list[int], whole: int, cpu: int, mem: int
) -> float:
    """`fragmentation`, remembered per node state (the order of `free` does not matter)."""
    key = (tuple(sorted(free)), whole, cpu, mem)
    v = memo.get(key)
    if v is None:
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        v = memo[key] = fragmentation(mix, free, whole, cpu, mem)
    return v


def growth(
    cap: CapacityIndex,
    n: int,
    mix: tuple[MixClass, ...],
    takes: Iterable[tuple[int, int, int]],
    cpu: int,
    mem: int,
    memo: dict | None = None,
) -> float:
    """How much taking `takes` ((GPU, milli, memory)), `cpu` and `mem` on node `n` grows its
    fragmentation for `mix` (negative: it shrinks). `memo`: see `_frag`."""
    taken = {g: (m, gm) for g, m, gm in takes}
    fm, fg, tot = cap.free_milli, cap.free_gmem, cap.gpu_total_mem
    before: list[int] = []
    after: list[int] = []
    whole_before = whole_after = 0
    for g in cap.node_gpus[n]:  # healthy or not, as the index counts them
        m, gm = taken.get(g, (0, 0))
        f = fm[g]
        before.append(f)
        after.append(f - m)
        if f >= MILLI_PER_GPU and fg[g] >= tot[g]:
            whole_before += 1
            if m == 0:
                whole_after += 1
    free_cpu, free_mem = cap.free_cpu[n], cap.free_mem[n]
    memo = {} if memo is None else memo
    return _frag(memo, mix, after, whole_after, free_cpu - cpu, free_mem - mem) - _frag(
        memo, mix, before, whole_before, free_cpu, free_mem
    )


def _whole_growth(
    cap: CapacityIndex,
    n: int,
    mix: tuple[MixClass, ...],
    count: int,
    cpu: int,
    mem: int,
    memo: dict,
) -> float:
    """`growth` of taking `count` whole free GPUs (and `cpu`, `mem`) on node `n`. GPUs as the
    index counts them (`node_free_milli`, `node_whole_free`: healthy or not); a node whose
    free GPUs are all whole is read from those two numbers alone."""
    whole = cap.node_whole_free[n]
    free_cpu, free_mem = cap.free_cpu[n], cap.free_mem[n]
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    if cap.node_free_milli[n] == whole * MILLI_PER_GPU:  # no partly used GPU
        key = (whole, free_cpu, free_mem)
        v = memo.get(key)
        if v is None:
            v = memo[key] = fragmentation(mix, [MILLI_PER_GPU] * whole, whole, free_cpu, free_mem)
        left = whole - count
        key = (left, free_cpu - cpu, free_mem - mem)
        w = memo.get(key)
        if w is None:
            w = memo[key] = fragmentation(
                mix, [MILLI_PER_GPU] * left, left, free_cpu - cpu, free_mem - mem
            )
        return w - v
    before = [f for f in (cap.free_milli[g] for g in cap.node_gpus[n]) if f > 0]
    after = list(before)
    left = count
    for i, f in enumerate(after):  # which whole GPUs go does not change the measure
        if left and f >= MILLI_PER_GPU:
            after[i] = f - MILLI_PER_GPU
            left -= 1
    return _frag(memo, mix, after, whole - count, free_cpu - cpu, free_mem - mem) - _frag(
        memo, mix, before, whole, free_cpu, free_mem
    )


def _candidates(
    idx: BucketIndex, lo: Any, passes: Callable[[int], bool], node_of: Callable[[int], int]
) -> list[tuple[Any, int]]:
    """(key, item) candidates, at most `CANDIDATES` of distinct nodes: the buckets from `lo`
    up, smallest key first; in each at most `PER_BUCKET` spread over it by rank
    (`probe_ranges`, as `BucketIndex.find_spread`), or the first passing item of the bucket
    when no probe finds one."""
    out: list[tuple[Any, int]] = []
    nodes: set[int] = set()
    for key, live in idx.buckets_from(lo):
        size = len(live)
        found = False
        ranges = ((0, size),) if size <= PER_BUCKET else probe_ranges(size, PER_BUCKET)
        every = size <= PER_BUCKET
        for start, stop in ranges:
            for r in range(start, stop):
                item = live[r]
                if passes(item):
                    found = True
                    n = node_of(item)
                    if n not in nodes:
                        nodes.add(n)
                        out.append((key, item))
                    if not every:
                        break
        if not found and not every:
            for item in live:
                if passes(item):
                    n = node_of(item)
                    if n not in nodes:
                        nodes.add(n)
                        out.append((key, item))
                    break
        if len(out) >= CANDIDATES:
            break
    return out


def least_fragmenting(
    cap: CapacityIndex,
    shape: Shape,
    idx: BucketIndex,
    mix: tuple[MixClass, ...],
    fits: Callable[[int], bool],
    memo: dict,
) -> tuple[tuple[int, Any, float], Any, int] | None:
    """((growth, key, balance), key, item) of the candidate of index `idx` that grows
    fragmentation least (`growth`, in whole milli), then fits tightest (the smallest key),
    then is best balanced (`balance.whole_imbalance`, `balance.fraction_score`: the order
    placement.py uses without this), then comes first: a node for whole GPUs (`shape.count`
    whole free GPUs, filed by whole free GPUs), a GPU for a fraction (filed by free milli and
    memory). `fits(node)`: whether the node has what the index does not say (CPUs, memory,
    GPUs big enough). `memo`: fragmentation by node state for `mix` (`ShapeMix.memo`)."""
    cpu, mem = shape.cpu_milli, shape.memory_mib
    best: tuple[tuple[int, Any, float], Any, int] | None = None
    if shape.count:  # whole GPUs
        count = shape.count
        for key, n in _candidates(idx, count, fits, _same):
            sc = (
                round(_whole_growth(cap, n, mix, count, cpu, mem, memo)),
                key,
                whole_imbalance(cap, n, key - count, cpu, mem),
            )
            if best is None or sc < best[0]:
                best = (sc, key, n)
        return best
    milli, lo_mem = shape.milli, shape.gpu_memory_mib
    gpu_node, free_gmem, total = cap.gpu_node, cap.free_gmem, cap.gpu_total_mem

    def passes(g: int) -> bool:
        need = lo_mem if lo_mem else total[g] * milli // MILLI_PER_GPU
        return free_gmem[g] >= need and fits(gpu_node[g])

    for key, g in _candidates(idx, (milli, lo_mem), passes, gpu_node.__getitem__):
        need = lo_mem if lo_mem else total[g] * milli // MILLI_PER_GPU
        n = gpu_node[g]
        sc = (
            round(
                growth(cap, n, mix, ((g, milli, need),), cpu, mem, memo)
                + out_of_step(cap, n, milli, cpu, mem)
            ),
            key,
            fraction_score(cap, g, milli, cpu, mem),
        )
        if best is None or sc < best[0]:
            best = (sc, key, g)
    return best


def out_of_step(cap: CapacityIndex, n: int, milli: int, cpu: int, mem: int) -> float:
    """How much a fraction taking `milli`, `cpu` and `mem` on node `n` puts the node's free
    GPU and free CPUs (or memory) out of step, in GPU milli: the change of `_gap`. Fractions
    ask for many CPUs per GPU milli (a tenth of a GPU with 4 CPUs), so no one of them strands
    a GPU (`growth` stays 0 until the node's CPUs run out), but a node whose CPUs go faster
    than its GPUs ends with GPUs no work can use. This sends CPU-hungry fractions to nodes
    with CPUs to spare and leaves nodes with few CPUs per GPU to work that asks for few."""
    return _gap(cap, n, milli, cpu, mem) - _gap(cap, n, 0, 0, 0)


def _gap(cap: CapacityIndex, n: int, milli: int, cpu: int, mem: int) -> float:
    """`GPU_AHEAD` × the node's GPUs × (its free GPU share − its free CPU or memory share,
    whichever is less) once `milli`, `cpu` and `mem` are taken, if GPUs are ahead;
    `CPU_AHEAD` × the same the other way round. In GPU milli."""
    gpus = len(cap.node_gpus[n])
    if not gpus:
        return 0.0
    g = (cap.node_free_milli[n] - milli) / (gpus * MILLI_PER_GPU)
    ctot, mtot = cap.cpu_total[n], cap.mem_total[n]
    c = (cap.free_cpu[n] - cpu) / ctot if ctot else 1.0
    m = (cap.free_mem[n] - mem) / mtot if mtot else 1.0
    h = min(c, m)
    weight = GPU_AHEAD if g > h else CPU_AHEAD
    return weight * abs(g - h) * gpus * MILLI_PER_GPU


def _same(n: int) -> int:
    return n
