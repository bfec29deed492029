"""Advance reservations in a cycle: N GPUs (of a model) booked for a tenant or some of its
users over a time window (gpupool.domain.reservations). Not to be confused with
gpupool.scheduler.reservations, the node a blocked workload holds for one cycle.

* `assign`: which GPUs each reservation keeps, the same every cycle for the same pool:
  reservations by start (then id) take whole GPUs of their model (on their nodes, if named)
  that no earlier reservation overlapping in time keeps, from the nodes with the most such
  GPUs first (then by name), lowest index first;
* `shortfall`: whether a new reservation fits beside the others (the API's overlap check);
* `cycle_with_reservations`: the cycle around them, in three steps:

  1. while a window is open, its holders' pending work is placed on its GPUs first (a cycle
     over those GPUs alone, no preemption);
  2. the main cycle (the caller's config and cache) sees every kept GPU as taken;
  3. what still waits and may use a reservation's GPUs is placed on them (again those GPUs
     alone, no preemption): before the window, work that ends by its start (it declares a
     max runtime) and work that may be stopped (preemptible or checkpointing); during the
     window, holders, and other preemptible or checkpointing work while no holder's work
     waits for them (idle reserved GPUs are lent).

  Stops: once the window opens, other preemptible or checkpointing work still on its GPUs
  is preempted (its reason names the reservation: the notice); during the window, lent work
  is preempted as soon as a holder's work waits. Work that may not be stopped and started
  before the reservation was booked keeps its GPUs until it ends (the holders get fewer
  meanwhile). A holder's workload runs either on its reservation's GPUs or elsewhere, never
  on both at once.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from gpupool.domain import GPUHealth, Node, Workload
from gpupool.domain.budgets import utc_text
from gpupool.domain.reservations import Reservation
from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.cycle import cycle
from gpupool.scheduler.types import (
    Admission,
    CycleStats,
    Decisions,
    PendingInfo,
    Preemption,
    RunningWorkload,
    SchedulerConfig,
    Snapshot,
)

GpuRef = tuple[str, int]  # (node, GPU index)


def _overlap(a: Reservation, b: Reservation) -> bool:
    return a.start < b.end and b.start < a.end


def assign(
    reservations: Iterable[Reservation], nodes: Sequence[Node]
) -> dict[str, tuple[GpuRef, ...]]:
    """Reservation id -> the GPUs it keeps (fewer than booked where the pool lacks them)."""
    done: list[tuple[Reservation, frozenset[GpuRef]]] = []
    out: dict[str, tuple[GpuRef, ...]] = {}
    for r in sorted(reservations, key=lambda r: (r.start, r.id)):
        busy: set[GpuRef] = set()
        for o, gpus in done:
            if _overlap(o, r):
                busy |= gpus
        free: list[tuple[int, str, list[int]]] = []
        for n in nodes:
            if not n.schedulable or (r.nodes and n.name not in r.nodes):
                continue
            idx = [
                g.index
                for g in n.gpus
                if g.schedulable
                and (r.model is None or g.model == r.model)
                and (n.name, g.index) not in busy
            ]
            if idx:
                free.append((-len(idx), n.name, sorted(idx)))
        got: list[GpuRef] = []
        for _, name, idx in sorted(free):
            for i in idx:
                if len(got) < r.gpus:
                    got.append((name, i))
        out[r.id] = tuple(got)
        done.append((r, frozenset(got)))
    return out


def shortfall(new: Reservation, others: Iterable[Reservation], nodes: Sequence[Node]) -> str | None:
    """None if `new` gets all its GPUs beside `others` (and they keep all theirs); else why
    not, naming the reservations it overlaps on the same GPUs."""
    others = [o for o in others if o.id != new.id]
    got = assign([*others, new], nodes)
    short = [r for r in [new, *others] if len(got.get(r.id, ())) < r.gpus]
    if not short:
        return None
    of = f" {new.model}" if new.model else ""
    on = f" on {', '.join(new.nodes)}" if new.nodes else ""
    usable = len(assign([dataclasses.replace(new, gpus=10**6)], nodes)[new.id])
    clash = [
        o
        for o in others
        if _overlap(o, new) and (o.model in (None, new.model) or new.model is None)
    ]
    booked = ", ".join(
        f"{o.label}: {o.gpus} from {utc_text(o.start)} to {utc_text(o.end)}" for o in clash[:3]
    )
    if not clash:
        return (
            f"the pool has {usable}{of} GPU{'s' if usable != 1 else ''}{on} that could be "
            f"reserved; book at most {usable}"
        )
    return (
        f"overlaps other reservations on the same GPUs: the pool has {usable}{of} "
        f"GPU{'s' if usable != 1 else ''}{on} and {booked} already hold some of them in "
        "that window; book fewer GPUs or another window"
    )


def _only(
    nodes: Sequence[Node], keep: Iterable[GpuRef] | None, blocked: set[GpuRef]
) -> tuple[Node, ...]:
    """`nodes` with the GPUs in `blocked` (or, with `keep`, every GPU not in it) marked
    unhealthy: taken for this cycle (the hardware, which says what could ever run, stays)."""
    k = None if keep is None else set(keep)
    out = []
    for n in nodes:
        gpus = tuple(
            dataclasses.replace(g, health=GPUHealth.UNHEALTHY)
            if ((n.name, g.index) not in k if k is not None else (n.name, g.index) in blocked)
            and g.health is not GPUHealth.UNHEALTHY
            else g
            for g in n.gpus
        )
        out.append(
            n
            if all(a is b for a, b in zip(gpus, n.gpus, strict=True))
            else dataclasses.replace(n, gpus=gpus)
        )
    return tuple(out)


def may_use(r: Reservation, w: Workload, now: float, holders_wait: bool) -> bool:
    """May `w` run on `r`'s GPUs now (step 3)?"""
    stoppable = w.preemptible or w.checkpointing
    if now < r.start:
        if r.holds(w) or stoppable:
            return True
        return w.max_runtime_s is not None and now + w.max_runtime_s <= r.start
    return r.holds(w) or (stoppable and not holders_wait)


def _stops(
    r: Reservation, gpus: Sequence[GpuRef], running: Sequence[RunningWorkload], holders_wait: bool
) -> list[Preemption]:
    """Work of others to stop on `r`'s GPUs while its window is open."""
    keep = set(gpus)
    seen: dict[str, RunningWorkload] = {}
    for rw in running:
        if any((s.node, s.gpu_index) in keep for s in rw.allocation.shares):
            seen.setdefault(rw.workload.id, rw)
    out = []
    for wid in sorted(seen):
        rw = seen[wid]
        w = rw.workload
        if rw.stopping or r.holds(w) or not (w.preemptible or w.checkpointing):
            continue
        started = w.started_at if w.started_at is not None else rw.allocation.since
        if started < r.start:
            at = utc_text(r.start)
            why = f"reservation {r.label} of tenant '{r.tenant}' starts at {at} on its GPUs"
        elif holders_wait:
            why = f"lent GPUs of reservation {r.label}: work of its holders waits for them"
        else:
            continue
        out.append(Preemption(wid, f"reservation:{r.id}", why))
    return out


def planned_stops(
    reservations: Sequence[Reservation],
    nodes: Sequence[Node],
    running: Sequence[RunningWorkload],
    now: float,
    within_s: float = float("inf"),
) -> list[tuple[RunningWorkload, Reservation]]:
    """Running work of others on the GPUs of a reservation starting within `within_s` that
    will be stopped at its start: it may be stopped (preemptible or checkpointing) and may
    still run then (no max runtime, or one that ends later). For notices ahead; by start,
    then workload id."""
    upcoming = sorted(
        (r for r in reservations if now < r.start <= now + within_s), key=lambda r: (r.start, r.id)
    )
    if not upcoming:
        return []
    got = assign([r for r in reservations if r.end > now], nodes)
    out: list[tuple[RunningWorkload, Reservation]] = []
    seen: set[str] = set()
    for r in upcoming:
        keep = set(got.get(r.id, ()))
        for rw in sorted(running, key=lambda x: x.workload.id):
            w = rw.workload
            if w.id in seen or rw.stopping or r.holds(w) or not (w.preemptible or w.checkpointing):
                continue
            if not any((sh.node, sh.gpu_index) in keep for sh in rw.allocation.shares):
                continue
            started = w.started_at if w.started_at is not None else rw.allocation.since
            if w.max_runtime_s is not None and started + w.max_runtime_s <= r.start:
                continue
            seen.add(w.id)
            out.append((rw, r))
    return out


def stop_notice_text(r: Reservation) -> str:
    return (
        f"will be stopped at {utc_text(r.start)}: reservation {r.label} of tenant "
        f"'{r.tenant}' starts on its GPUs (checkpointing work resumes from its checkpoint)"
    )


def _note(r: Reservation, n: int, now: float) -> str:
    of = f" {r.model}" if r.model else ""
    gpus = f"{n}{of} GPU{'s' if n != 1 else ''}"
    if now < r.start:
        return (
            f"; {gpus} kept for reservation {r.label} of '{r.tenant}' from "
            f"{utc_text(r.start)}: only work that ends by then (a max runtime) or may be "
            "stopped runs there"
        )
    return f"; {gpus} reserved for {r.label} of '{r.tenant}' until {utc_text(r.end)}"


def _on_kept(nodes: Sequence[Node], keep: Sequence[GpuRef]) -> tuple[Node, ...]:
    """The nodes holding `keep`, with every other GPU of theirs taken: a sub-cycle over a
    reservation's GPUs sees only those (the running work elsewhere still counts for limits)."""
    names = {n for n, _ in keep}
    return _only([n for n in nodes if n.name in names], keep, set())


def _sub(
    snap: Snapshot,
    nodes: tuple[Node, ...],
    running: Sequence[RunningWorkload],
    work: Sequence[Workload],
    now: float,
    config: SchedulerConfig,
) -> Decisions:
    sub = Snapshot(nodes, snap.tenants, tuple(running), snap.attained_service)
    return cycle(sub, work, now, dataclasses.replace(config, preemption=False))


def _free(gpus: Sequence[GpuRef], running: Sequence[RunningWorkload]) -> int:
    """How many of `gpus` no running work holds any of."""
    keep = set(gpus)
    names = {n for n, _ in gpus}
    for rw in running:
        a = rw.allocation
        if a.node in names or a.multi_node:
            for sh in a.shares:
                keep.discard((sh.node, sh.gpu_index))
    return len(keep)


def _as_running(w: Workload, a: Admission) -> RunningWorkload:
    return RunningWorkload(w, a.allocation)


def cycle_with_reservations(
    snap: Snapshot,
    pending: Sequence[Workload],
    now: float,
    config: SchedulerConfig,
    cache: SchedulerCache | None,
    reservations: Sequence[Reservation],
) -> Decisions:
    """`cycle()` with the reservations not yet over kept (see the module docstring)."""
    live = sorted((r for r in reservations if r.end > now), key=lambda r: (r.start, r.id))
    got = assign(live, snap.nodes)
    kept: set[GpuRef] = set().union(*got.values()) if got else set()
    by_id = {w.id: w for w in pending}
    running = list(snap.running)
    admissions: list[Admission] = []
    preemptions: list[Preemption] = []
    left = list(pending)

    def take(d: Decisions) -> None:
        nonlocal left
        for a in d.admissions:
            admissions.append(a)
            running.append(_as_running(by_id[a.workload_id], a))
        if d.admissions:
            done = {a.workload_id for a in d.admissions}
            left = [w for w in left if w.id not in done]

    # 1. holders first, on their own GPUs
    for r in live:
        if r.on(now) and got[r.id]:
            free = _free(got[r.id], running) * 1000
            mine = [w for w in left if r.holds(w) and 0 < w.request.total_gpu_milli <= free]
            if mine:
                take(_sub(snap, _on_kept(snap.nodes, got[r.id]), running, mine, now, config))
    # 2. the main cycle, every kept GPU taken
    main_snap = dataclasses.replace(
        snap, nodes=_only(snap.nodes, None, kept), running=tuple(running)
    )
    main = cycle(main_snap, left, now, config, cache)
    take(main)
    preemptions.extend(main.preemptions)
    # 3. what may use a reservation's GPUs, on them
    for r in live:
        if not got[r.id]:
            continue
        wants = [
            w for w in left if r.holds(w) and w.request.wants_gpu and w.id not in main.unschedulable
        ]
        holders_wait = r.on(now) and bool(wants)
        if r.on(now):
            preemptions.extend(_stops(r, got[r.id], running, holders_wait))
        free = _free(got[r.id], running) * 1000  # none free: nothing to place there
        ok = [
            w
            for w in left
            if 0 < w.request.total_gpu_milli <= free
            and w.id not in main.unschedulable
            and may_use(r, w, now, holders_wait)
        ]
        if ok:
            take(_sub(snap, _on_kept(snap.nodes, got[r.id]), running, ok, now, config))
    seen: set[str] = set()
    stops = []
    for p in preemptions:
        if p.workload_id not in seen:
            seen.add(p.workload_id)
            stops.append(p)
    admitted = {a.workload_id for a in admissions}
    notes = [(r, _note(r, len(got[r.id]), now)) for r in live if got[r.id]]
    #: requested model -> the notes of the reservations whose GPUs it could have used
    extra: dict[str | None, str] = {}
    info: dict[str, PendingInfo] = {}
    for wid, pi in main.pending.items():
        if wid in admitted:
            continue
        w = by_id.get(wid)
        if w is None or not w.request.wants_gpu:
            info[wid] = pi
            continue
        m = w.request.gpu_model
        text = extra.get(m)
        if text is None:
            text = extra[m] = "".join(
                t for r, t in notes if r.model is None or m is None or m == r.model
            )
        info[wid] = (
            PendingInfo(pi.reason + text, pi.position, pi.tenant_position, pi.wait) if text else pi
        )
    return Decisions(
        admissions=tuple(admissions),
        preemptions=tuple(stops),
        pending=info,
        unschedulable=main.unschedulable,
        fair_shares=main.fair_shares,
        stats=CycleStats(main.stats.candidates_considered, len(admissions), len(stops)),
    )
