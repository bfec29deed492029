"""The mix: the running work by shape class, for fragmentation-aware placement
(gpupool.scheduler.fragmentation).

A class is whole GPUs by count, or fractions by size (up to 100, 250, 500, 750, 999 milli),
with CPUs and memory by powers of two; each class is weighted by the GPU its work holds and
described by its mean request per GPU milli. The capacity index keeps one (`apply_takes`), as
work starts and ends, so a cached index and a fresh one have the same mix. Pure: no I/O, no
clock; integers kept, floats only derived.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpupool.domain import MILLI_PER_GPU

if TYPE_CHECKING:
    from gpupool.scheduler.capacity import CapacityIndex

#: the classes of the mix: the heaviest (by GPUs held) first, at most this many
TOP_CLASSES = 12

#: (class key) -> [workloads, GPU milli, CPU milli, memory MiB], summed
_Sums = dict[tuple, list[int]]
#: (weight, whole GPU count or 0, fraction milli or 0, CPU milli per GPU milli, memory MiB
#: per GPU milli) of one class
MixClass = tuple[float, int, int, float, float]
_FRACTION_SIZES = (100, 250, 500, 750, MILLI_PER_GPU - 1)


def class_key(gpu_takes: Sequence[tuple[int, int, int]], cpu: int, mem: int, milli: int) -> tuple:
    """The class of one running workload from what it takes (`milli`: its GPU milli in all);
    () for no GPU. Called for every start and end: kept cheap."""
    n = len(gpu_takes)
    if not n or milli <= 0:
        return ()
    if milli >= n * MILLI_PER_GPU:  # whole GPUs (a take is at most one GPU)
        return (n, cpu.bit_length(), mem.bit_length())
    size = _FRACTION_SIZES[min(bisect_left(_FRACTION_SIZES, milli), len(_FRACTION_SIZES) - 1)]
    return (-size, cpu.bit_length(), mem.bit_length())


class ShapeMix:
    """The running work by class (`class_key`), kept by `CapacityIndex.apply_takes`."""

    __slots__ = ("_sums", "_version", "_memo", "_strands", "_lean", "memo")

    def __init__(self) -> None:
        self._sums: _Sums = {}
        self._version = 0
        self._memo: tuple[int, tuple[MixClass, ...]] | None = None
        #: (version, the nodes, what `active` answers for them)
        self._strands: tuple[int, object, tuple[MixClass, ...]] | None = None
        #: (the nodes, `leanest` of them)
        self._lean: tuple[object, tuple[tuple[int, int], tuple[int, int]]] | None = None
        #: fragmentation by node state for what `active` answers (gpupool.scheduler
        #: .fragmentation), emptied when that changes
        self.memo: dict = {}

    def active(self, cap: CapacityIndex) -> tuple[MixClass, ...]:
        """The classes if fragmentation scoring applies to `cap` (`strands`), else (). Called
        for every placement: one comparison while the mix and the nodes are the same."""
        memo = self._strands
        if memo is not None and memo[0] == self._version and memo[1] is cap.nodes:
            return memo[2]
        mix = self.classes()
        lean = self._lean
        if lean is None or lean[0] is not cap.nodes:
            lean = self._lean = (cap.nodes, leanest(cap))
        top = [self._sums[k] for k in self._top()]
        on = bool(mix) and strands(lean[1], top)
        self._strands = (self._version, cap.nodes, mix if on else ())
        self.memo = {}
        return self._strands[2]

    def add(self, key: tuple, milli: int, cpu: int, mem: int, sign: int) -> None:
        """Count one workload in (`sign` 1) or out (-1)."""
        if not key:
            return
        s = self._sums.get(key)
        if s is None:
            s = self._sums[key] = [0, 0, 0, 0]
        s[0] += sign
        s[1] += sign * milli
        s[2] += sign * cpu
        s[3] += sign * mem
        if s[0] <= 0:
            del self._sums[key]
        self._version += 1

    def add_counted(self, sums: dict[tuple, list[int]]) -> None:
        """Count in many workloads at once: per class key, [workloads, GPU milli, CPU milli,
        memory MiB] summed (as `add` with `sign` 1 for each)."""
        have = self._sums
        for key, (n, milli, cpu, mem) in sums.items():
            if not key or n <= 0:
                continue
            s = have.get(key)
            if s is None:
                have[key] = [n, milli, cpu, mem]
            else:
                s[0] += n
                s[1] += milli
                s[2] += cpu
                s[3] += mem
            self._version += 1

    def _top(self) -> list[tuple]:
        """The keys of the `TOP_CLASSES` classes holding the most GPU."""
        ranked = sorted(self._sums.items(), key=lambda kv: (-kv[1][1], kv[0]))
        return [k for k, _ in ranked[:TOP_CLASSES]]

    def classes(self) -> tuple[MixClass, ...]:
        """The `TOP_CLASSES` heaviest classes, weights summing to 1 (empty: nothing runs)."""
        memo = self._memo
        if memo is not None and memo[0] == self._version:
            return memo[1]
        top = [(k, self._sums[k]) for k in self._top()]
        total = sum(s[1] for _, s in top)
        out: list[MixClass] = []
        for key, (count, milli, cpu, mem) in top:
            g = key[0]
            out.append(
                (
                    milli / total,
                    g if g > 0 else 0,
                    0 if g > 0 else milli // count,
                    cpu / milli,
                    mem / milli,
                )
            )
        result = tuple(out)
        self._memo = (self._version, result)
        return result


def leanest(cap: CapacityIndex) -> tuple[tuple[int, int], tuple[int, int]]:
    """((CPU milli, GPU milli), (memory MiB, GPU milli)) of the nodes with the fewest CPUs
    and the least memory per GPU ((0, 0) each if no node has GPUs)."""
    cpu, mem = (0, 0), (0, 0)
    for n, gpus in enumerate(cap.node_gpus):
        if gpus:
            milli = len(gpus) * MILLI_PER_GPU
            c, m = cap.cpu_total[n], cap.mem_total[n]
            if not cpu[1] or c * cpu[1] < cpu[0] * milli:
                cpu = (c, milli)
            if not mem[1] or m * mem[1] < mem[0] * milli:
                mem = (m, milli)
    return cpu, mem


def strands(lean: tuple[tuple[int, int], tuple[int, int]], sums: list[list[int]]) -> bool:
    """True if the leanest nodes (`leanest`) have fewer CPUs or less memory per GPU than some
    class (`sums`: [workloads, GPU milli, CPU milli, memory MiB] of each) asks for: there CPUs
    and memory can strand GPUs, and fragmentation scoring is worth its cost. In integers."""
    (c, cg), (m, mg) = lean
    if not cg:
        return False
    return any(c * g < cpu * cg or m * g < mem * mg for _, g, cpu, mem in sums)
