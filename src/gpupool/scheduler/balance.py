"""Balance: among placements that tie on GPU fit, the one that strands the fewest GPUs.

GPU fit decides first (placement.py: the fewest whole free GPUs that suffice; for fractions
the GPU with the least free milli). Among the candidates that tie on it:

* a fraction goes to the node with the fewest whole free GPUs (a fraction opening a fresh GPU
  does it on a node already in use, keeping empty nodes whole for whole-GPU work);
* then, and for whole GPUs, the node whose free GPU share stays closest to its free CPU and
  memory share (the smaller of the two: the one that runs out first) — GPUs are not stranded
  on nodes whose CPUs or memory are used up;
* CPU-only work goes to the node where its CPUs strand the fewest free GPUs.

At most `CANDIDATES` tied candidates are compared, which bounds the cost per placement; they
are spread over all the tied ones (`BucketIndex.find_spread`: evenly spaced ranks by id, the
first and last included), not the lowest ids, which are often nodes of one kind (registered
together). Pure; reads the capacity index only.
"""

from __future__ import annotations

from gpupool.domain import MILLI_PER_GPU
from gpupool.scheduler.capacity import CapacityIndex

#: how many tied candidates are compared (spread over them by id); bounds the cost per placement:
#: GPUs for a fraction, nodes for whole GPUs. 16 packs as well as 64 did (bench/packing.py,
#: every mix, 1 and 8 times the cluster, scoring on and off: within 0.1 point; issue 32,
#: bench/results/scheduler_scale.md) and searches a large bucket in a quarter of the probes
CANDIDATES = 16
WHOLE_CANDIDATES = 16


def _shares(
    cap: CapacityIndex, n: int, gpu_milli: int, cpu_milli: int, memory_mib: int
) -> tuple[float, float]:
    """(free GPU share, min(free CPU share, free memory share)) of node `n` once the given
    resources are taken there."""
    gpus = cap.node_gpus[n]
    gfree = cap.node_free_milli[n] - gpu_milli
    g_share = gfree / (len(gpus) * MILLI_PER_GPU) if gpus else 0.0
    ctot, mtot = cap.cpu_total[n], cap.mem_total[n]
    c_share = (cap.free_cpu[n] - cpu_milli) / ctot if ctot else 1.0
    m_share = (cap.free_mem[n] - memory_mib) / mtot if mtot else 1.0
    return g_share, min(c_share, m_share)


def imbalance(cap: CapacityIndex, n: int, gpu_milli: int, cpu_milli: int, memory_mib: int) -> float:
    """|free GPU share − min(free CPU share, free memory share)| of node `n` once the given
    resources are taken there; 0: its resources stay in step. In [0, 1]."""
    if not cap.node_gpus[n]:
        return 0.0
    g, h = _shares(cap, n, gpu_milli, cpu_milli, memory_mib)
    return min(1.0, abs(g - h))


def whole_imbalance(
    cap: CapacityIndex, n: int, whole_left: int, cpu_milli: int, memory_mib: int
) -> float:
    """`imbalance` for whole-GPU work on a node of the whole-GPU index, its free GPU share
    taken as the whole free GPUs left (`whole_left`): cheap, and exact on exclusive GPUs."""
    gpus = len(cap.node_gpus[n])
    if not gpus:
        return 0.0
    ctot, mtot = cap.cpu_total[n], cap.mem_total[n]
    c_share = (cap.free_cpu[n] - cpu_milli) / ctot if ctot else 1.0
    m_share = (cap.free_mem[n] - memory_mib) / mtot if mtot else 1.0
    return min(1.0, abs(whole_left / gpus - min(c_share, m_share)))


def whole_free(cap: CapacityIndex, n: int) -> int:
    """Whole free GPUs (all milli and memory free) on node `n` (kept by the index)."""
    return cap.node_whole_free[n]


def whole_free_gpu(cap: CapacityIndex, g: int) -> bool:
    return cap.free_milli[g] >= MILLI_PER_GPU and cap.free_gmem[g] >= cap.gpu_total_mem[g]


def fraction_score(
    cap: CapacityIndex, g: int, milli: int, cpu_milli: int, memory_mib: int
) -> float:
    """Lower is better: whole free GPUs left on the node, then imbalance (in [0, 1])."""
    n = cap.gpu_node[g]
    left = whole_free(cap, n) - (1 if whole_free_gpu(cap, g) else 0)
    return left + imbalance(cap, n, milli, cpu_milli, memory_mib)


def cpu_only_score(cap: CapacityIndex, n: int, cpu_milli: int, memory_mib: int) -> float:
    """Lower is better: the GPU share left free on node `n` that its CPUs or memory could no
    longer serve once CPU-only work takes `cpu_milli` and `memory_mib` there."""
    if not cap.node_gpus[n]:
        return 0.0
    g, h = _shares(cap, n, 0, cpu_milli, memory_mib)
    return max(0.0, g - h)
