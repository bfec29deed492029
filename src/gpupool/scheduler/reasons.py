"""Human-readable reasons: why a workload waits, and why one can never run.

`Hardware` summarizes the nodes by distinct profile (whatever their state or health, since a
down node may come back) so that "could any node ever hold this?" is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain import MILLI_PER_GPU, Node, SharingMode
from gpupool.scheduler.capacity import CPU_ONLY, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.limits import gpus_text


def gib(mib: int) -> str:
    return f"{mib / 1024:g} GiB"


def cpus(milli: int) -> str:
    return f"{milli / 1000:g} CPU" + ("" if milli == 1000 else "s")


def what(shape: Shape) -> str:
    """'4 H100 GPUs', '0.25 of a shared A100 GPU with 10 GiB', 'CPUs only'."""
    model = f"{shape.model} " if shape.model else ""
    if shape.kind == WHOLE:
        s = f"{shape.count} {model}GPU" + ("s" if shape.count != 1 else "")
        if shape.gpu_memory_mib:
            s += f" with at least {gib(shape.gpu_memory_mib)} each"
        return s
    if shape.kind == CPU_ONLY:
        return "no GPU"
    s = f"{shape.milli / MILLI_PER_GPU:g} of a shared {model}GPU"
    if shape.gpu_memory_mib:
        s += f" with {gib(shape.gpu_memory_mib)}"
    return s


def host_text(shape: Shape) -> str:
    parts = []
    if shape.cpu_milli:
        parts.append(cpus(shape.cpu_milli))
    if shape.memory_mib:
        parts.append(f"{gib(shape.memory_mib)} memory")
    return " and ".join(parts)


@dataclass(frozen=True, slots=True)
class _Profile:
    cpu: int
    mem: int
    #: (model, memory, sharing) per GPU
    gpus: tuple[tuple[str, int, SharingMode], ...]


class Hardware:
    """What the nodes could hold if they were empty; answers 'can this ever run?'."""

    def __init__(self, nodes: tuple[Node, ...]):
        profiles = {
            _Profile(
                n.cpu_milli,
                n.memory_mib,
                tuple(sorted((g.model, g.memory_mib, g.sharing) for g in n.gpus)),
            )
            for n in nodes
        }
        self.profiles = sorted(profiles, key=lambda p: (p.cpu, p.mem, p.gpus))
        self.empty = not nodes
        self._memo: dict[Shape, str | None] = {}

    def never_fits(self, shape: Shape) -> str | None:
        """Why no node could hold `shape` even with nothing running on it, or None."""
        if self.empty:
            return None  # no node registered yet: keep waiting rather than fail
        if shape in self._memo:
            return self._memo[shape]
        r = self._never_fits(shape)
        self._memo[shape] = r
        return r

    def _never_fits(self, shape: Shape) -> str | None:
        host_ok = [
            p for p in self.profiles if p.cpu >= shape.cpu_milli and p.mem >= shape.memory_mib
        ]
        need = what(shape)
        if not host_ok:
            big_cpu = max(p.cpu for p in self.profiles)
            big_mem = max(p.mem for p in self.profiles)
            return (
                f"needs {host_text(shape)} on one node; the largest node has "
                f"{cpus(big_cpu)} and {gib(big_mem)} memory"
            )
        if shape.kind == CPU_ONLY:
            return None
        best = 0
        for p in host_ok:
            if shape.kind == WHOLE:
                counts: dict[str, int] = {}
                for model, mem, _ in p.gpus:
                    if (shape.model in (None, model)) and mem >= shape.gpu_memory_mib:
                        counts[model] = counts.get(model, 0) + 1
                most = max(counts.values(), default=0)
                if most >= shape.count:
                    return None
                best = max(best, most)
            else:
                for model, mem, sharing in p.gpus:
                    if sharing is SharingMode.SHARED and shape.model in (None, model):
                        if mem >= shape.gpu_memory_mib:
                            return None
                        best = max(best, mem)
        if shape.kind == WHOLE:
            kind = f"{shape.model} GPUs" if shape.model else "GPUs of one model"
            return f"needs {need} on one node; the most any node has is {best} {kind}"
        if best:
            return f"needs {need}; the largest shared GPU has {gib(best)}"
        model = f"{shape.model} " if shape.model else ""
        return f"needs {need}; no node has shared {model}GPUs (an admin sets GPUs to 'shared')"


def no_fit_reason(cap: CapacityIndex, shape: Shape) -> str:
    """Why `shape` does not fit on the free capacity right now."""
    model = f"{shape.model} " if shape.model else ""
    if shape.kind == WHOLE:
        most = cap.most_whole_free(shape.model)
        if most < shape.count:
            return (
                f"no node has {shape.count} free {model}GPU{'s' if shape.count != 1 else ''} "
                f"on one host; the most is {most}"
            )
        extra = host_text(shape)
        mem = f" of {gib(shape.gpu_memory_mib)}+" if shape.gpu_memory_mib else ""
        return (
            f"no node with {shape.count} free {model}GPU{'s' if shape.count != 1 else ''}{mem} "
            f"also has {extra or 'room'} free"
        )
    if shape.kind == CPU_ONLY:
        return f"no node has {host_text(shape) or 'room'} free"
    base = f"no shared {model}GPU has {shape.milli / MILLI_PER_GPU:g} free"
    if shape.gpu_memory_mib:
        base += f" with {gib(shape.gpu_memory_mib)} of memory"
    if host_text(shape):
        base += f" on a node with {host_text(shape)} free"
    return base


def behind_text(tenant: str, workload_id: str) -> str:
    return (
        f"waiting behind higher-priority work of {tenant} ({workload_id} holds a reservation "
        "on the capacity this would use)"
    )


def admission_cap_text(cap: int) -> str:
    return f"waiting for the next cycle (at most {cap} admissions per cycle)"


def reclaim_text(n_victims: int, stopping: int) -> str:
    total = n_victims + stopping
    return (
        f"reclaiming its guaranteed share: waiting for {total} preempted "
        f"workload{'s' if total != 1 else ''} to stop"
    )


__all__ = [
    "Hardware",
    "admission_cap_text",
    "behind_text",
    "gpus_text",
    "no_fit_reason",
    "reclaim_text",
    "what",
]
