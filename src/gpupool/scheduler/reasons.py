"""Human-readable reasons: why a workload waits, and why one can never run.

`Hardware` summarizes the nodes by distinct profile (whatever their state or health, since a
down node may come back) so that "could any node ever hold this?" is cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpupool.domain import MILLI_PER_GPU, Node, SharingMode
from gpupool.domain.mig import find_model, model_for
from gpupool.domain.placement import ENGINE_LABEL
from gpupool.scheduler.capacity import CPU_ONLY, FRACTION, MIG, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.constraints import (
    engine_groups,
    node_allows,
    nodes_noun,
    none_match_text,
    where_text,
)
from gpupool.scheduler.limits import gpus_text
from gpupool.scheduler.mig import mig_no_fit_reason


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
    if shape.kind == MIG:
        return f"a {shape.mig} MIG instance" + (f" of a {shape.model}" if shape.model else "")
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
        #: profile -> how many nodes have it (multi-node requests need several)
        self.node_counts: dict[_Profile, int] = {}
        self.nodes = nodes
        #: per constraint (gpupool.scheduler.constraints.Where): the summary of its nodes
        self._subsets: dict = {}
        labels = []
        for n in nodes:
            p = _Profile(
                n.cpu_milli,
                n.memory_mib,
                tuple(sorted((g.model, g.memory_mib, g.sharing) for g in n.gpus)),
            )
            self.node_counts[p] = self.node_counts.get(p, 0) + 1
            labels.append((n.labels, p))
        #: each node's labels and profile, in order: a summary with other labels answers
        #: pinned work differently (gpupool.scheduler.cache keeps one while these are equal)
        self.labels = tuple(labels)
        self.profiles = sorted(self.node_counts, key=lambda p: (p.cpu, p.mem, p.gpus))
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
        if shape.where is not None:
            return self._never_fits_where(shape)
        if shape.nodes > 1:
            return self._gang_never_fits(shape)
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
        if shape.kind == MIG or (shape.kind == FRACTION and _mig_holds(host_ok, shape)):
            return _never_mig(host_ok, shape)
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
            if best == 0 and shape.model:
                have = sorted({m for p in host_ok for m, _, _ in p.gpus})
                return f"needs {need} on one node; no node has {shape.model} GPUs" + (
                    f" (the models here: {', '.join(have)})" if have else ""
                )
            kind = f"{shape.model} GPUs" if shape.model else "GPUs of one model"
            return f"needs {need} on one node; the most any node has is {best} {kind}"
        if best:
            return f"needs {need}; the largest shared GPU has {gib(best)}"
        model = f"{shape.model} " if shape.model else ""
        return f"needs {need}; no node has shared {model}GPUs (an admin sets GPUs to 'shared')"

    def _subset(self, key: object, nodes: tuple[Node, ...]) -> Hardware:
        sub = self._subsets.get(key)
        if sub is None:
            sub = self._subsets[key] = self if len(nodes) == len(self.nodes) else Hardware(nodes)
        return sub

    def _never_fits_where(self, shape: Shape) -> str | None:
        """Constrained work (gpupool.scheduler.constraints): on the nodes it may use only;
        a gang on the nodes of one engine."""
        where = shape.where
        assert where is not None
        free = shape._replace(where=None)
        allowed = tuple(n for n in self.nodes if node_allows(n.label_map, where))
        if not allowed:
            return none_match_text(self.nodes, where)
        sub = self._subset(where, allowed)
        head = where_text(self.nodes, where)
        if shape.nodes > 1:
            engines = [n.label_map.get(ENGINE_LABEL) for n in allowed]
            groups = engine_groups(engines, list(range(len(allowed))))
            if len(groups) == 1 and sub is self:
                return self._never_fits(free)
            whys = []
            for i, ids in enumerate(groups):
                part = self._subset((where, i), tuple(allowed[n] for n in ids))
                why = part.never_fits(free)
                if why is None:
                    return None
                whys.append((len(ids), why))
            why = max(whys)[1]
            if len(groups) > 1:
                why = "all of its nodes must run on one engine; " + why
        elif sub is self:
            return self._never_fits(free)
        else:
            why = sub.never_fits(free)
            if why is None:
                return None
        return f"{head}; {why}" if head else why

    def _gang_never_fits(self, shape: Shape) -> str | None:
        """A gang: `shape.nodes` nodes that could each hold `shape.count` GPUs of one model
        (the same on all) and the CPUs and memory asked for."""
        one = shape._replace(nodes=1)
        if self._never_fits(one) is not None:
            return (
                f"needs {shape.nodes} nodes that each hold {what(one)}"
                + (f" and {host_text(one)}" if host_text(one) else "")
                + "; no node could hold one part"
            )
        by_model: dict[str, int] = {}
        for p, count in self.node_counts.items():
            if p.cpu < shape.cpu_milli or p.mem < shape.memory_mib:
                continue
            counts: dict[str, int] = {}
            for model, mem, _ in p.gpus:
                if shape.model in (None, model) and mem >= shape.gpu_memory_mib:
                    counts[model] = counts.get(model, 0) + 1
            for model, c in counts.items():
                if c >= shape.count:
                    by_model[model] = by_model.get(model, 0) + count
        most = max(by_model.values(), default=0)
        if most >= shape.nodes:
            return None
        return (
            f"needs {shape.nodes} nodes with {what(one)} each; only {most} "
            f"node{'s' if most != 1 else ''} could ever hold that"
        )


def outside_text(cap: CapacityIndex, shape: Shape, most: int = 2) -> str:
    """'; GPU 2 on node-a is used outside gpupool by slurm job 4711 (bob)' for the GPUs
    `shape` could use that work outside gpupool holds ('' if none), at most `most` named."""
    if shape.kind == CPU_ONLY:
        return ""
    found = cap.outside_gpus(shape.model, shared_only=shape.kind != WHOLE)
    if not found:
        return ""
    parts = [f"GPU {i} on {node} is used outside gpupool by {o.text}" for node, i, o in found]
    if len(parts) > most:
        k = len(parts) - most
        more = "1 more GPU is" if k == 1 else f"{k} more GPUs are"
        parts = [*parts[:most], f"{more} used outside gpupool"]
    return "; " + "; ".join(parts)


def _mig_holds(profiles: list[_Profile], shape: Shape) -> bool:
    """True if a `mig` GPU of one of `profiles` has a profile that could hold fraction
    `shape` (its compute share and memory at least what it asks)."""
    for p in profiles:
        for model, mem, sharing in p.gpus:
            if sharing is not SharingMode.MIG or shape.model not in (None, model):
                continue
            m = model_for(model, mem)
            if m is not None and any(
                q.milli >= shape.milli and q.memory_mib >= shape.gpu_memory_mib for q in m.profiles
            ):
                return True
    return False


def _never_mig(profiles: list[_Profile], shape: Shape) -> str | None:
    """None if some `mig` GPU's model has profile `shape.mig` (a fraction that a MIG profile
    holds: always None), else why not."""
    if shape.kind != MIG:
        return None
    models = set()
    for p in profiles:
        for model, mem, sharing in p.gpus:
            if sharing is not SharingMode.MIG or shape.model not in (None, model):
                continue
            m = model_for(model, mem)
            if m is not None:
                if m.profile(shape.mig or "") is not None:
                    return None
                models.add(m.key)
    if models:
        have = "; ".join(
            f"{k}: " + ", ".join(q.name for q in find_model(k).profiles)  # type: ignore[union-attr]
            for k in sorted(models)
        )
        return f"needs {what(shape)}; no GPU in mig mode has that profile ({have})"
    model = f"{shape.model} " if shape.model else ""
    return (
        f"needs {what(shape)}; no node has {model}GPUs in mig mode (an admin sets them with "
        "gpupool gpu set-sharing NODE:INDEX mig)"
    )


def no_fit_reason(cap: CapacityIndex, shape: Shape) -> str:
    """Why `shape` does not fit on the free capacity right now (naming the GPUs it could
    use that are used outside gpupool, if any). Work constrained to some nodes is told
    about those (gpupool.scheduler.constraints)."""
    if shape.where is not None and not cap.unrestricted(shape.where):
        return no_fit_text(cap, shape, what(shape), host_text(shape) or "room")
    return _no_fit_reason(cap, shape) + outside_text(cap, shape)


def _no_fit_reason(cap: CapacityIndex, shape: Shape) -> str:
    model = f"{shape.model} " if shape.model else ""
    if shape.kind == MIG:
        return mig_no_fit_reason(cap, shape)
    if shape.kind == WHOLE:
        most = cap.most_whole_free(shape.model)
        if most < shape.count:
            return (
                f"no node has {shape.count} free {model}GPU{'s' if shape.count != 1 else ''} "
                f"on one host{_whole_census_text(cap, shape, most)}"
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


def _whole_census_text(cap: CapacityIndex, shape: Shape, most: int) -> str:
    """Why no node has the whole GPUs `shape` asks for: all in use, free ones spread over
    nodes, or free only as parts of shared GPUs (which whole-GPU work cannot use)."""
    usable, free, partial = cap.whole_census(shape.model)
    model = f"{shape.model} " if shape.model else ""
    kept = " or kept for work ahead in the queue" if cap.held_host else ""
    if usable == 0:
        text = f": no {model}GPU is usable now"
        if not cap.outside_gpus(shape.model):  # else outside_text names who holds them
            text += " (their nodes are down, cordoned or draining)"
    elif free == 0:
        every = "the one" if usable == 1 else f"all {usable}"
        text = f": {every} {model}GPU{'s' if usable != 1 else ''} {_are(usable)} in use{kept}"
    else:
        text = f"; the most is {most}"
        if free > most:
            text += f" ({free} are free in all, spread over nodes)"
    if partial:
        n = partial / MILLI_PER_GPU
        text += (
            f"; {n:g} GPU{'' if n <= 1 else 's'} {'is' if n <= 1 else 'are'} free but only as "
            "parts of shared GPUs, which whole-GPU work cannot use: a shared GPU is whole "
            "again when all the work sharing it has ended"
        )
    return text


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def beyond_guarantee_text(tenant: str, guaranteed_milli: int, used_milli: int, milli: int) -> str:
    """Added to the reason of blocked work that would take its tenant beyond its guarantee:
    such work never reclaims (so it has no reclaim time); it waits for GPUs to free up."""
    if guaranteed_milli <= 0:
        return (
            f"; {tenant} has no guaranteed GPUs, so it cannot reclaim any: this waits for GPUs "
            "to free up"
        )
    return (
        f"; {tenant} is guaranteed {gpus_text(guaranteed_milli)} and holds "
        f"{gpus_text(used_milli)}, so {gpus_text(milli)} more would be beyond its guarantee: "
        "it cannot reclaim them, and this waits for GPUs to free up"
    )


def requeued_text(submitted_at: float) -> str:
    """Added to the reason of work requeued after a preemption: it kept its submit time, so
    it may stand ahead of work submitted after it."""
    return (
        f"; requeued after a preemption, it keeps its place in line from its first submit "
        f"({clock_text(submitted_at)})"
    )


def behind_text(tenant: str, workload_id: str) -> str:
    return (
        f"waiting behind higher-priority work of {tenant} ({workload_id} holds a reservation "
        "on the capacity this would use)"
    )


def behind_host_text(tenant: str, workload_id: str, node: str) -> str:
    """CPU-only work that would fit on a held node, but not beside what its holder needs."""
    return (
        f"waiting behind higher-priority work of {tenant} ({workload_id} holds a reservation "
        f"on {node}, and the CPUs and memory this would use there are kept for it)"
    )


def admission_cap_text(cap: int) -> str:
    return f"waiting for the next cycle (at most {cap} admissions per cycle)"


def untried_text(tenant: str, cap: int | None, blocked_by: str | None) -> str:
    """Why work the cycle never walked waits: the admission cap (`cap`), a blocked head of its
    tenant's queue without backfill (`blocked_by`), or the next cycle."""
    if cap is not None:
        return admission_cap_text(cap)
    if blocked_by is not None:
        return (
            f"waiting behind {blocked_by}, which is ahead in {tenant}'s queue "
            "and does not fit yet (backfill is off)"
        )
    return "waiting for the next cycle"


def clock_text(t: float) -> str:
    """A time on the scheduler's clock (Unix seconds) as '2026-11-25 10:42:05 UTC'."""
    return datetime.fromtimestamp(round(t), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def preemption_plan_text(at: float, tenant: str) -> str:
    """What running work a reclaim will take is told (the victim's side of an `owed` wait):
    'will be preempted at 03:52 UTC for lab-b's guarantee unless GPUs free up'."""
    when = datetime.fromtimestamp(round(at), UTC).strftime("%H:%M UTC")
    return f"will be preempted at {when} for {tenant}'s guarantee unless GPUs free up"


def names_text(ids: Sequence[str], most: int = 3) -> str:
    """'a', 'a and b', 'a, b and c', 'a, b, c and 2 more'."""
    if len(ids) > most:
        return f"{', '.join(ids[:most])} and {len(ids) - most} more"
    if len(ids) <= 1:
        return "".join(ids)
    return f"{', '.join(ids[:-1])} and {ids[-1]}"


def owed_text(
    tenant: str, milli: int, victims: Sequence[str], tenants: Sequence[str], until: float
) -> str:
    """Added to the reason of blocked work whose reclaim is not due yet."""
    of = f" of {', '.join(tenants)}" if tenants else ""
    return (
        f"; {tenant} is owed {gpus_text(milli)} within its guarantee: unless they free up "
        f"first, they will be taken from {names_text(victims)}{of} at {clock_text(until)}"
    )


def expected_start_text(node: str, at: float) -> str:
    """Added to the reason of blocked work that holds a reservation on `node`."""
    return (
        f"; {node} is reserved for it: expected to start by {clock_text(at)}, when the work "
        "in its way there reaches its max runtime"
    )


def reclaim_text(n_victims: int, stopping: int) -> str:
    total = n_victims + stopping
    return (
        f"reclaiming its guaranteed share: waiting for {total} preempted "
        f"workload{'s' if total != 1 else ''} to stop"
    )


def move_text(n_reclaimed: int, n_moved: int) -> str:
    """Why work owed GPUs waits while smaller work is moved off a node for it."""
    parts = [f"{n_moved} smaller checkpointing workload{'s' if n_moved != 1 else ''} moved"]
    if n_reclaimed:
        parts.append(f"{n_reclaimed} borrowed workload{'s' if n_reclaimed != 1 else ''} reclaimed")
    return (
        "reclaiming its guaranteed share on one node (the free GPUs are spread over nodes): "
        f"waiting for {' and '.join(parts)} to stop"
    )


__all__ = [
    "Hardware",
    "admission_cap_text",
    "behind_host_text",
    "behind_text",
    "beyond_guarantee_text",
    "clock_text",
    "expected_start_text",
    "gpus_text",
    "move_text",
    "no_fit_reason",
    "outside_text",
    "owed_text",
    "reclaim_text",
    "requeued_text",
    "untried_text",
    "what",
]


def no_fit_text(cap: CapacityIndex, shape: Shape, what: str, host: str) -> str:
    """Why constrained `shape` does not fit now: counted over the nodes it may use only.
    `what` and `host` describe the shape (gpupool.scheduler.reasons)."""
    where = shape.where
    assert where is not None
    head = where_text(cap.nodes, where)
    noun = nodes_noun(where)
    model = f"{shape.model} " if shape.model else ""
    if shape.kind == WHOLE:
        most = _most_whole(cap, shape, cap.where_mask(where))
        s = "s" if shape.count != 1 else ""
        if most < shape.count:
            return f"{head}: {noun} has {shape.count} free {model}GPU{s} (the most is {most})"
        return f"{head}: {noun} with {shape.count} free {model}GPU{s} also has {host} free"
    if shape.kind == FRACTION:
        return f"{head}: {noun} has a shared {model}GPU with {shape.milli / MILLI_PER_GPU:g} free"
    return f"{head}: {noun} has room for {what} now"


def _most_whole(cap: CapacityIndex, shape: Shape, allowed: list[bool]) -> int:
    """The most whole free GPUs of one model (`shape.model` if given) on one usable node
    that `allowed` lets it use: from the top of the whole-GPU index down, the first
    allowed node's count (as `CapacityIndex.most_whole_free`, on the allowed nodes)."""
    most = 0
    for m in [shape.model] if shape.model is not None else cap.models:
        idx = cap.whole.get(m)
        if idx is None:
            continue
        for key in reversed(idx.keys()):
            if key <= most:
                break
            if any(allowed[n] for n in idx.items_under(key)):
                most = key
                break
    return most
