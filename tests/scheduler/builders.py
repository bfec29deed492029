"""Small builders for scheduler scenarios: a node, a tenant, a workload in a line each.

Also `apply()`, which plays the caller's part between cycles as the server loop and the
simulator do (gpupool.scheduler.followup): admissions start running, preempted work goes
back to the pending queue, nodes preempted for work are nominated to it, finished work
leaves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from gpupool.domain import (
    GPU,
    MILLI_PER_GPU,
    Allocation,
    Enforcement,
    Node,
    NodeState,
    Quota,
    Request,
    Share,
    SharingMode,
    Tenant,
    TenantTree,
    Workload,
    WorkloadState,
    transition,
)
from gpupool.scheduler import Decisions, RunningWorkload, Snapshot
from gpupool.scheduler.followup import Nominations, requeued

GIB = 1024


def node(
    name: str,
    gpus: int = 8,
    model: str = "H100",
    gpu_gib: int = 80,
    cpus: int = 64,
    memory_gib: int = 512,
    sharing: str = "exclusive",
    state: str = "ready",
) -> Node:
    return Node(
        name=name,
        gpus=tuple(
            GPU(i, f"{name}-gpu{i}", model, gpu_gib * GIB, SharingMode(sharing))
            for i in range(gpus)
        ),
        cpu_milli=cpus * 1000,
        memory_mib=memory_gib * GIB,
        state=NodeState(state),
    )


def nodes(prefix: str, count: int, **kw) -> list[Node]:
    return [node(f"{prefix}-{i}", **kw) for i in range(count)]


def tenant(
    name: str,
    guaranteed: float = 0,
    limit: float | None = None,
    weight: float = 1.0,
    max_per_user: float | None = None,
) -> Tenant:
    return Tenant(name, Quota.gpus(guaranteed, limit, weight, max_per_user))


def tree(*tenants: Tenant) -> TenantTree:
    return TenantTree(tenants)


def job(
    id: str,
    tenant: str = "lab-a",
    user: str = "alice",
    gpus: int = 0,
    fraction: float = 0,
    gpu_gib: float = 0,
    model: str | None = None,
    cpus: float = 1,
    memory_gib: float = 1,
    priority: int = 0,
    preemptible: bool = True,
    submit: float = 0,
) -> Workload:
    return Workload(
        id=id,
        tenant=tenant,
        owner=user,
        request=Request(
            gpus=gpus,
            gpu_milli=int(round(fraction * 1000)),
            gpu_memory_mib=int(gpu_gib * GIB),
            gpu_model=model,
            cpu_milli=int(cpus * 1000),
            memory_mib=int(memory_gib * GIB),
        ),
        priority=priority,
        preemptible=preemptible,
        submitted_at=submit,
    )


def running(
    w: Workload,
    on: Node,
    gpu_indexes: Iterable[int] = (),
    since: float = 0.0,
    fraction: tuple[int, int, int] | None = None,
    stopping: bool = False,
) -> RunningWorkload:
    """`w` running on `on`, holding whole GPUs `gpu_indexes` or one `fraction` =
    (gpu index, milli, memory MiB)."""
    if fraction is not None:
        idx, milli, mem = fraction
        g = on.gpu(idx)
        shares = (Share(on.name, idx, g.uuid, milli, mem, Enforcement.POLICED),)
    else:
        shares = tuple(
            Share(on.name, i, on.gpu(i).uuid, MILLI_PER_GPU, on.gpu(i).memory_mib)
            for i in gpu_indexes
        )
    w = dataclasses.replace(w, state=WorkloadState.RUNNING, admitted_at=since, started_at=since)
    alloc = Allocation(w.id, on.name, shares, since, w.request.cpu_milli, w.request.memory_mib)
    return RunningWorkload(w, alloc, stopping)


def snapshot(
    node_list: Sequence[Node],
    tenants: TenantTree | Sequence[Tenant],
    run: Sequence[RunningWorkload] = (),
    attained: dict[str, float] | None = None,
) -> Snapshot:
    t = tenants if isinstance(tenants, TenantTree) else TenantTree(tenants)
    return Snapshot(tuple(node_list), t, tuple(run), dict(attained or {}))


def apply(
    snap: Snapshot, pending: Sequence[Workload], d: Decisions, now: float
) -> tuple[Snapshot, list[Workload]]:
    """The caller's part, as the server loop and the simulator play it
    (gpupool.scheduler.followup): admitted work runs, preempted work is requeued (if it asked
    to be) and the nodes preempted for work are nominated to it, failed work leaves."""
    by_id = {w.id: w for w in pending}
    admitted = {a.workload_id: a for a in d.admissions}
    victims = {p.workload_id: p for p in d.preemptions}
    noms = Nominations()
    noms.nodes = dict(snap.nominated)
    noms.record(d, snap.running)
    run = [rw for rw in snap.running if rw.workload.id not in victims]
    for wid, a in admitted.items():
        w = dataclasses.replace(
            by_id[wid], state=WorkloadState.RUNNING, admitted_at=now, started_at=now
        )
        run.append(RunningWorkload(w, a.allocation))
    back = [
        requeued(transition(rw.workload, WorkloadState.PREEMPTED, now, p.reason)[0], now)
        for rw in snap.running
        if (p := victims.get(rw.workload.id)) is not None
    ]
    left = [w for w in pending if w.id not in admitted and w.id not in d.unschedulable]
    left += [w for w in back if w is not None]
    nominated = noms.for_snapshot({w.id for w in left})
    return dataclasses.replace(snap, running=tuple(run), nominated=nominated), left


def finish(snap: Snapshot, *ids: str) -> Snapshot:
    """Work `ids` ended: it leaves the snapshot."""
    return dataclasses.replace(
        snap, running=tuple(rw for rw in snap.running if rw.workload.id not in ids)
    )


def placed(d: Decisions) -> dict[str, tuple[str, tuple[tuple[int, int], ...]]]:
    """workload id -> (node, ((gpu index, milli), ...)) of this cycle's admissions."""
    return {
        a.workload_id: (
            a.allocation.node,
            tuple((s.gpu_index, s.milli) for s in a.allocation.shares),
        )
        for a in d.admissions
    }
