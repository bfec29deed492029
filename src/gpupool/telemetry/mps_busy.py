"""Busy time of MPS clients when NVML does not give it per client (an estimate, labelled so).

Under CUDA MPS the GPU runs every client's kernels in one context, that of the GPU's MPS
server (`nvidia-cuda-mps-server`). NVML then reports the work under the server's pid
(`nvmlDeviceGetProcessUtilization`), and the clients may or may not be listed among the
GPU's processes; when they are, they have no SM samples of their own. Seen on an H200
(bench/results/energy_gpu_check_h200/): two half-GPU MPS jobs burned the GPU and telemetry
found no busy time for either.

The rule (docs/telemetry.md, "Busy time under MPS"): the MPS work of a GPU is the SM use
of gpupool's MPS server there (`Via.SERVICE`) or, where that is not known, the GPU's
utilization less the SM use of the other processes NVML measured there. It is split over
the MPS shares of that GPU whose processes have no SM use of their own, by their size
(milli). A client that NVML measures keeps its measurement and is left out of the split.
This is an estimate: it cannot tell a busy client from an idle one that shares its server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpupool.domain import Allocation, Enforcement
from gpupool.telemetry.attribution import Via
from gpupool.telemetry.sampler import Frame


def mps_holders(allocations: Iterable[Allocation]) -> dict[str, dict[str, int]]:
    """GPU -> workload id -> the milli of its fractional MPS shares on that GPU."""
    holders: dict[str, dict[str, int]] = {}
    for a in allocations:
        for sh in a.shares:
            if sh.enforcement is Enforcement.MPS and not sh.whole:
                on = holders.setdefault(sh.gpu_uuid, {})
                on[a.workload_id] = on.get(a.workload_id, 0) + sh.milli
    return holders


def mps_estimate(
    frame: Frame,
    gpu_uuid: str,
    workload_id: str,
    window_mean: Callable[[int | None], float | None] | None = None,
) -> float | None:
    """The utilization (% of the GPU) that falls to `workload_id`'s MPS share on `gpu_uuid`
    by the rule above; None when it holds no MPS share there, when its processes are
    measured, or when neither the server's nor the GPU's utilization is known.

    `window_mean(pid)`: the mean SM use of process `pid` (None: the GPU's utilization) over
    the accounted window, from the sampler's history; the frame's value where it gives None.
    Who holds the GPU, and who is measured, is read from `frame` (the latest sample)."""
    mean = window_mean or (lambda _pid: None)
    gpu = frame.snapshot.gpu(gpu_uuid)
    if gpu is None:
        return None
    holders = mps_holders(frame.allocations).get(gpu_uuid, {})
    if workload_id not in holders:
        return None
    server: list[float] = []
    server_pids: list[int] = []
    measured = 0.0  # SM use NVML gave to processes other than the server
    own: dict[str, float] = {}
    for p in frame.snapshot.processes:
        if p.gpu_uuid != gpu_uuid or p.sm_util is None:
            continue
        o = frame.owners.get(p.pid)
        if o is not None and o.via is Via.SERVICE and o.service_gpu == gpu_uuid:
            server.append(p.sm_util)
            server_pids.append(p.pid)
            continue
        measured += p.sm_util
        if o is not None and o.workload_id in holders:
            own[o.workload_id] = own.get(o.workload_id, 0.0) + p.sm_util
    if own.get(workload_id, 0.0) > 0:
        return None  # measured: not estimated
    if server:
        means = [mean(pid) for pid in server_pids]
        pool = sum(s if m is None else m for s, m in zip(server, means, strict=True))
    elif (util := mean(None)) is not None or (util := gpu.util_gpu) is not None:
        pool = util - measured
    else:
        return None
    unmeasured = sum(m for wid, m in holders.items() if own.get(wid, 0.0) <= 0)
    return max(0.0, min(100.0, pool)) * holders[workload_id] / unmeasured
