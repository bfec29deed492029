"""Service levels inside a tenant: discretized least attained service (Tiresias' idea).

With `SchedulerConfig.service_levels_s` (thresholds of attained GPU-seconds) a workload's
*level* is how many thresholds its attained service has passed: its service from earlier
attempts (`Snapshot.attained_service[workload id]`, milli-GPU-seconds) plus, while running,
GPU-time since it started. Under `fair`, guarantees and fair share still decide between
tenants; inside a tenant:

* waiting work is ordered by priority, then level (lowest first), then submit time;
* a waiting workload that does not fit may preempt running work **of its own tenant** that
  is at least `preempt_levels_apart` levels higher (default 2: work of a similar size is left
  alone), only if that work declares `checkpointing` (it resumes from where
  it stopped and keeps its service), is preemptible, not stopping, has run at least
  `min_runtime_s` and has no higher priority. So the tenant's usage is unchanged and no
  other tenant's share or guarantee moves; short work no longer waits behind long work.
  Multi-node work (a gang) is never such a victim: a gang stopped for one-node work must
  find N whole nodes again, which on a busy cluster of small jobs takes hours (issue 32).

Victims on one node, highest level then most attained service first, only until the
candidate fits; the node needing the fewest victims (then the least GPU milli) wins.

**Levels relative to the pool's time scale** (`SchedulerConfig.service_levels_relative`): the
thresholds are multiples of `Snapshot.service_scale`, a quantile of the pool's run lengths
that the caller estimates and keeps (`gpupool.scheduler.levelscale`: Kaplan-Meier over
recently started runs, with hysteresis). Without a scale yet, the absolute `service_levels_s`
apply. `ladder` is the one home of the rule; `cycle()` applies it (`effective_config`) and
the simulator asks it for its level wakeups and pending window. Pure.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence

from gpupool.domain import Workload
from gpupool.scheduler.capacity import CapacityIndex, Shape
from gpupool.scheduler.placement import Placement, place_on_node
from gpupool.scheduler.types import Policy, RunningWorkload, SchedulerConfig, Snapshot

#: how many nodes with victims are compared per candidate (bounds the cost)
NODES_COMPARED = 8


def ladder(config: SchedulerConfig, scale: float) -> tuple[float, ...]:
    """The service-level thresholds (GPU-seconds) in force: with `service_levels_relative` and
    a scale (GPU-seconds, above 0), its multiples of `scale`; else `config.service_levels_s`
    (also when that is empty: service levels off, relative ones too)."""
    rel = config.service_levels_relative
    if not rel or scale <= 0 or not config.service_levels_s:
        return config.service_levels_s
    return tuple(sorted(round(m * scale, 3) for m in rel if m > 0))


def effective_config(config: SchedulerConfig, snapshot: Snapshot) -> SchedulerConfig:
    """`config` with the thresholds of `ladder` in `service_levels_s` (itself when they are
    the absolute ones)."""
    if not config.service_levels_relative or snapshot.service_scale <= 0:
        return config
    levels = ladder(config, snapshot.service_scale)
    if levels == config.service_levels_s:
        return config
    return dataclasses.replace(config, service_levels_s=levels)


def fixed_ladder(config: SchedulerConfig, scale: float) -> SchedulerConfig:
    """`config` with the thresholds in force at `scale` as its absolute levels and no
    relative ones: for a forward replay from a snapshot (gpupool.sim.forecast) that must
    decide with the ladder of the moment, not estimate a scale of its own."""
    if not config.service_levels_relative:
        return config
    return dataclasses.replace(
        config, service_levels_s=ladder(config, scale), service_levels_relative=()
    )


def level_of(attained_milli_s: float, levels_s: tuple[float, ...]) -> int:
    """How many thresholds (GPU-seconds) `attained_milli_s` (milli-GPU-seconds) has passed."""
    return bisect_right(levels_s, attained_milli_s / 1000.0)


def pending_level(w: Workload, attained: Mapping[str, float], levels_s: tuple[float, ...]) -> int:
    return level_of(attained.get(w.id, 0.0), levels_s) if attained else 0


class LevelPreemptor:
    """Finds, per cycle, same-tenant checkpointing victims at higher service levels."""

    def __init__(
        self,
        cap: CapacityIndex,
        running: tuple[RunningWorkload, ...],
        attained: Mapping[str, float],
        now: float,
        min_runtime_s: float,
        levels_s: tuple[float, ...],
        apart: int,
    ):
        self.cap = cap
        self.levels_s = levels_s
        #: victims are at least this many levels above the candidate
        self.apart = max(1, apart)
        self.taken: set[str] = set()
        #: tenant -> node -> [(level, service, rw)], best victim first
        self.by_tenant: dict[str, dict[int, list[tuple[int, float, RunningWorkload]]]] = {}
        self._failed: set[tuple[str, int, int, Shape]] = set()
        for rw in running:
            w = rw.workload
            if not w.checkpointing or not w.preemptible or rw.stopping or w.request.nodes > 1:
                continue  # a gang is never a victim here: see the module docstring
            a = rw.allocation
            if now - a.since < min_runtime_s:
                continue
            n = cap.node_ids.get(a.node)
            if n is None:
                continue
            service = attained.get(w.id, 0.0) + (now - a.since) * a.gpu_milli
            lvl = level_of(service, levels_s)
            if lvl < self.apart:
                continue
            self.by_tenant.setdefault(w.tenant, {}).setdefault(n, []).append((lvl, service, rw))
        for nodes in self.by_tenant.values():
            for lst in nodes.values():
                lst.sort(key=lambda e: (-e[0], -e[1], e[2].workload.id))

    def has_victims(self, tenant: str) -> bool:
        return tenant in self.by_tenant

    def find(
        self, w: Workload, level: int, shape: Shape, skip: set[int]
    ) -> tuple[int, tuple[RunningWorkload, ...], Placement] | None:
        """(node, victims, placement) making room for `w` (at `level`) from work at least
        `apart` levels higher, or None."""
        nodes = self.by_tenant.get(w.tenant)
        if not nodes:
            return None
        memo = (w.tenant, level, w.priority, shape)
        if memo in self._failed:
            return None
        best: tuple[tuple, int, tuple[RunningWorkload, ...], Placement] | None = None
        compared = 0
        for n in sorted(nodes):
            if n in skip or not self.cap.node_ready[n]:
                continue
            chosen: list[RunningWorkload] = []
            fit = None
            for lvl, _, rw in nodes[n]:
                if lvl < level + self.apart:
                    break
                if rw.workload.id in self.taken or rw.workload.priority > w.priority:
                    continue
                chosen.append(rw)
                fit = self._fits(n, shape, chosen)
                if fit is not None:
                    break
            if fit is None:
                continue
            score = (len(chosen), sum(c.allocation.gpu_milli for c in chosen), n)
            if best is None or score < best[0]:
                best = (score, n, tuple(chosen), fit)
            compared += 1
            if compared >= NODES_COMPARED:
                break
        if best is None:
            self._failed.add(memo)
            return None
        _, n, victims, fit = best
        for v in victims:
            self.taken.add(v.workload.id)
        return n, victims, fit

    def _fits(self, n: int, shape: Shape, rws: list[RunningWorkload]) -> Placement | None:
        cap = self.cap
        cpu = mem = 0
        gpu: dict[int, tuple[int, int]] = {}
        for rw in rws:
            a = rw.allocation
            cpu += a.cpu_milli
            mem += a.memory_mib
            for s in a.shares:
                g = cap.gpu_id(n, s.gpu_index)
                if g is None:
                    continue
                m0, g0 = gpu.get(g, (0, 0))
                smem = cap.gpu_total_mem[g] if s.whole else s.memory_mib
                gpu[g] = (m0 + s.milli, g0 + smem)
        return place_on_node(cap, n, shape, cpu, mem, gpu)


#: siblings' service counts in steps of this fraction of the first level's threshold, so a
#: waiting workload's key moves a few times a level, not every cycle (`sibling_service`)
SIBLING_STEPS = 8


def _sibling_key(w: Workload) -> tuple:
    """Siblings share tenant, owner and GPU request (GPUs, fraction, GPU memory, model, MIG
    profile, nodes): plain values, hashed without the request's own `__hash__`."""
    r = w.request
    return (w.tenant, w.owner, r.gpus, r.gpu_milli, r.gpu_memory_mib, r.gpu_model, r.mig, r.nodes)


def sibling_service(
    snapshot: Snapshot,
    pending: Sequence[Workload],
    now: float,
    window_s: float,
    step_milli_s: float = 0.0,
) -> dict[str, float]:
    """Workload id -> the service (milli-GPU-seconds) a waiting `checkpointing` workload takes
    from its siblings (`SchedulerConfig.service_levels_siblings_s`), only where more than its
    own kept service: the most attained by `checkpointing` work of the same tenant, owner and
    GPU request (`_sibling_key`) submitted within `window_s` of it, running (kept plus the
    current run) or waiting again after a preemption (kept), rounded down to a multiple of
    `step_milli_s` (when above 0). Pure; O((running + pending) log)."""
    attained = snapshot.attained_service
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for rw in snapshot.running:
        w = rw.workload
        if w.checkpointing:
            a = rw.allocation
            s = attained.get(w.id, 0.0) + max(0.0, now - a.since) * a.gpu_milli
            groups.setdefault(_sibling_key(w), []).append((w.submitted_at, s))
    waiting = [w for w in pending if w.checkpointing]
    if attained:
        for w in waiting:
            s = attained.get(w.id, 0.0)
            if s > 0.0:
                groups.setdefault(_sibling_key(w), []).append((w.submitted_at, s))
    out: dict[str, float] = {}
    if not groups:
        return out
    #: per group, the submit times in order and the services in the same order
    index: dict[tuple, tuple[list[float], list[float]]] = {}
    for key, sibs in groups.items():
        sibs.sort()
        index[key] = ([sub for sub, _ in sibs], [s for _, s in sibs])
    for w in waiting:
        hit = index.get(_sibling_key(w))
        if hit is None:
            continue
        subs, services = hit
        at = w.submitted_at
        lo = bisect_left(subs, at - window_s)
        hi = bisect_right(subs, at + window_s)
        if lo >= hi:
            continue
        best = max(services[lo:hi])
        if step_milli_s > 0.0:
            best -= best % step_milli_s
        if best > attained.get(w.id, 0.0):
            out[w.id] = best
    return out


def with_sibling_levels(
    snapshot: Snapshot, pending: Sequence[Workload], now: float, config: SchedulerConfig
) -> Snapshot:
    """`snapshot` with `sibling_service` merged into its attained service under the waiting
    workloads' ids, which is what their order and level read (`Queues`, the level
    preemptor); itself when the option is off or gives nothing. `cycle()` calls it only while
    some `checkpointing` work runs."""
    window = config.service_levels_siblings_s
    if window <= 0 or not config.service_levels_s or config.policy != Policy.FAIR:
        return snapshot
    step = config.service_levels_s[0] * 1000.0 / SIBLING_STEPS
    hints = sibling_service(snapshot, pending, now, window, step)
    if not hints:
        return snapshot
    return dataclasses.replace(snapshot, attained_service={**snapshot.attained_service, **hints})


def fine_level(attained_milli_s: float, levels_s: tuple[float, ...]) -> float:
    """The level of `level_of`, plus the service as a fraction of the next threshold (below
    1; nothing at the top level): the in-tenant order of `service_levels_fine_order`, least
    attained service first inside a level."""
    level = bisect_right(levels_s, attained_milli_s / 1000.0)
    if level >= len(levels_s):
        return float(level)
    return level + min(0.999, attained_milli_s / (levels_s[level] * 1000.0))
