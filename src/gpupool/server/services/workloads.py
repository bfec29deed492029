"""Workloads: submit (validated so that nothing that can never run enters the queue), list,
show, cancel, logs, and the queue."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable

from sqlalchemy.orm import Session

from gpupool.domain import (
    ACTIVE_STATES,
    MILLI_PER_GPU,
    Node,
    Request,
    SharingMode,
    TenantTree,
    ValidationError,
    Workload,
    WorkloadKind,
    WorkloadState,
)
from gpupool.domain.commands import LINUX_MAX_ARG_STRLEN, ArgLimits, check_command
from gpupool.domain.profiles import Profile
from gpupool.executors.base import ExecutorError, NotSupported
from gpupool.server.auth import Principal
from gpupool.server.context import AppContext
from gpupool.server.problems import PermissionDenied
from gpupool.server.schemas.convert import allocation_out, event_out, request_from_in, workload_out
from gpupool.server.schemas.workloads import (
    LogsOut,
    ResourcesIn,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
)
from gpupool.server.services import lifecycle
from gpupool.server.views import JSONObject, queue_entry
from gpupool.store import (
    AllocationRepo,
    Conflict,
    EventRepo,
    NodeRepo,
    NotFound,
    ProfileRepo,
    TenantRepo,
    WorkloadRepo,
    new_workload_id,
)

log = logging.getLogger(__name__)
S = WorkloadState
RESOURCE_FIELDS = set(ResourcesIn.model_fields)
#: stored state values of work that holds an allocation
_ACTIVE = frozenset(str(x) for x in ACTIVE_STATES)


def _gpus(milli: int) -> str:
    n = milli / MILLI_PER_GPU
    return f"{n:g} GPU" + ("" if n == 1 else "s")


@functools.cache
def os_arg_limits() -> ArgLimits:
    """This host's limits on a new process's arguments (read once, on first use)."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError):
        arg_max = -1
    default = ArgLimits()
    return ArgLimits(
        arg_max=arg_max if arg_max > 0 else default.arg_max,
        arg_strlen_max=LINUX_MAX_ARG_STRLEN if sys.platform.startswith("linux") else None,
    )


def check_fits_some_node(req: Request, nodes: list[Node]) -> None:
    """Raise ValidationError if no registered node could ever hold `req`, saying what could."""
    if not req.wants_gpu and not req.cpu_milli and not req.memory_mib:
        return
    model = f" {req.gpu_model}" if req.gpu_model else ""
    if req.wants_gpu and not any(n.gpus for n in nodes):
        raise ValidationError(
            "no node with GPUs is registered; ask for CPU only or ask an admin to add a node",
            "gpus",
        )

    def fitting(n: Node) -> list:
        return [
            g
            for g in n.gpus
            if (req.gpu_model is None or g.model == req.gpu_model)
            and g.memory_mib >= req.gpu_memory_mib
        ]

    if req.gpus:
        best = max((len(fitting(n)) for n in nodes), default=0)
        if best < req.gpus:
            mem = f" with {req.gpu_memory_mib} MiB" if req.gpu_memory_mib else ""
            raise ValidationError(
                f"no node has {req.gpus}{model} GPUs{mem} (the most on one node is {best}); "
                f"ask for at most {best}" + (" or another GPU model" if model else ""),
                "gpus",
            )
    elif req.gpu_milli:
        shareable = [
            g
            for n in nodes
            for g in fitting(n)
            if g.sharing in (SharingMode.SHARED, SharingMode.MIG)
        ]
        if not shareable:
            raise ValidationError(
                f"no{model} GPU with {req.gpu_memory_mib} MiB allows fractional shares; ask for "
                "whole GPUs (gpus: 1), or ask an admin to set a GPU's sharing mode to 'shared'",
                "gpu_fraction",
            )
    if req.cpu_milli and all(n.cpu_milli and n.cpu_milli < req.cpu_milli for n in nodes):
        most = max(n.cpu_milli for n in nodes) / 1000
        raise ValidationError(
            f"no node has {req.cpu_milli / 1000:g} CPUs; ask for at most {most:g}", "cpus"
        )
    if req.memory_mib and all(n.memory_mib and n.memory_mib < req.memory_mib for n in nodes):
        most = max(n.memory_mib for n in nodes)
        raise ValidationError(
            f"no node has {req.memory_mib} MiB of memory; ask for at most {most}", "memory_mib"
        )


def check_within_limits(req: Request, tenant: str, tree: TenantTree) -> None:
    """Raise ValidationError if a limit of the tenant (or an ancestor) or its per-user cap is
    below the request, so it could never be admitted."""
    want = req.total_gpu_milli
    if not want:
        return
    for name in tree.ancestors(tenant):
        q = tree.get(name).quota
        if q.limit_milli is not None and want > q.limit_milli:
            raise ValidationError(
                f"{name}'s limit is {_gpus(q.limit_milli)}, so a request for {_gpus(want)} can "
                f"never run; ask for at most {q.limit_milli / 1000:g} or ask an admin to raise it",
                "gpus",
            )
    cap = tree.get(tenant).quota.max_milli_per_user
    if cap is not None and want > cap:
        raise ValidationError(
            f"{tenant} allows at most {_gpus(cap)} per user; ask for at most {cap / 1000:g}",
            "gpus",
        )


def _pick_tenant(p: Principal, tree: TenantTree, asked: str | None) -> str:
    if asked is not None:
        if asked not in tree:
            mine = [t for t in tree.leaves() if p.can_submit(t)]
            raise ValidationError(
                f"unknown tenant {asked!r}; you may submit to: {', '.join(mine) or 'none'}",
                "tenant",
            )
        if not p.can_submit(asked):
            raise PermissionDenied(
                f"you may not submit to {asked!r}; members and tenant-admins of it may"
            )
        if not tree.is_leaf(asked):
            raise ValidationError(
                f"{asked!r} has sub-tenants and only leaf tenants hold work; submit to one of "
                + ", ".join(t for t in tree.leaves() if tree.in_subtree(t, asked)),
                "tenant",
            )
        return asked
    mine = [t for t in tree.leaves() if p.can_submit(t)]
    direct = [t for t in mine if any(m.tenant == t for m in p.memberships)]
    choices = direct or mine
    if len(choices) == 1:
        return choices[0]
    if not choices:
        raise PermissionDenied("you are not a member of any tenant; ask a tenant-admin to add you")
    raise ValidationError(
        f"you belong to several tenants; say which one (tenant): {', '.join(choices)}", "tenant"
    )


def _resolve_request(body: WorkloadIn, profile: Profile | None) -> tuple[Request, WorkloadKind]:
    if profile is None:
        return request_from_in(body), WorkloadKind(body.kind)
    if body.model_fields_set & RESOURCE_FIELDS:
        raise ValidationError(
            "give either a profile or resources "
            f"({', '.join(sorted(body.model_fields_set & RESOURCE_FIELDS))}), not both",
            "profile",
        )
    kind = WorkloadKind(body.kind) if "kind" in body.model_fields_set else profile.kind
    return profile.request, kind


def submit(
    ctx: AppContext,
    p: Principal,
    body: WorkloadIn,
    on_insert: Callable[[Session, Workload], None] | None = None,
) -> WorkloadOut:
    """Validate (in a read transaction), then insert (a short write transaction). The checks
    are advisory: a quota changed in between is caught by the scheduler. `on_insert` runs in
    the insert's transaction (services.idempotency binds its key there)."""
    now = ctx.clock.now()
    check_command(body.command, os_arg_limits())  # what no executor could ever launch
    with ctx.store.read() as s:
        tree = TenantRepo(s).tree()
        tenant = _pick_tenant(p, tree, body.tenant)
        profile = None
        if body.profile is not None:
            try:
                profile = ProfileRepo(s).get(body.profile)
            except NotFound as e:
                raise ValidationError(str(e), "profile") from None
            if not profile.allows(tenant):
                raise PermissionDenied(f"profile {profile.name!r} is not offered to {tenant!r}")
        req, kind = _resolve_request(body, profile)
        if kind is WorkloadKind.JOB and not body.command:
            raise ValidationError(
                'a job needs a command, e.g. "command": ["python", "train.py"]', "command"
            )
        nodes = [n for n in NodeRepo(s).list() if ctx.runs_work_on(n.name)]
        check_fits_some_node(req, nodes)
        check_within_limits(req, tenant, tree)
    w = Workload(
        id=new_workload_id(),
        tenant=tenant,
        owner=p.name,
        request=req,
        kind=kind,
        priority=body.priority,
        preemptible=body.preemptible,
        requeue_on_preemption=body.requeue_on_preemption,
        max_runtime_s=body.max_runtime_s,
        submitted_at=now,
        command=tuple(body.command),
        profile=body.profile,
    )
    with ctx.store.write() as s:
        repo = WorkloadRepo(s)
        if not TenantRepo(s).exists(tenant):
            raise ValidationError(f"tenant {tenant!r} was just deleted", "tenant")
        repo.add(w, name=body.name)
        if on_insert is not None:
            on_insert(s, w)
        rec = repo.record(w.id)
    ctx.wake_scheduler()
    return workload_out(rec)


def _visible_or_403(p: Principal, w: Workload) -> None:
    if w.owner != p.name and not p.can_read(w.tenant):
        raise PermissionDenied(f"you may not see workload {w.id}; it belongs to {w.tenant}")


def list_workloads(
    ctx: AppContext,
    p: Principal,
    *,
    states: list[WorkloadState] | None,
    tenant: str | None,
    user: str | None,
    kind: str | None,
    limit: int,
    offset: int,
) -> list[JSONObject]:
    """The workloads `p` may see, newest first, as WorkloadOut JSON objects."""
    with ctx.store.read() as s:
        rows = WorkloadRepo(s).rows(
            states=states,
            tenants=p.readable_roots(),
            visible_to_user=p.name,
            tenant=tenant,
            owner=user,
            kind=kind,
            limit=limit,
            offset=offset,
        )
        active = [r.id for r in rows if r.state in _ACTIVE]
        allocs = AllocationRepo(s).active_for_many(active)
    return ctx.views.workloads(rows, allocs)


def get_workload(ctx: AppContext, p: Principal, workload_id: str) -> WorkloadDetailOut:
    with ctx.store.read() as s:
        rec = WorkloadRepo(s).record(workload_id)
        _visible_or_403(p, rec.workload)
        last = AllocationRepo(s).last_for(workload_id)
        events = EventRepo(s).list(workload_id=workload_id, limit=1000)
    alloc = allocation_out(*last) if last else None
    out = workload_out(rec, alloc)
    return WorkloadDetailOut(
        **out.model_dump(), events=[event_out(i, e) for i, e in reversed(events)]
    )


def _may_change(p: Principal, w: Workload) -> None:
    if w.owner != p.name and not p.can_manage(w.tenant):
        raise PermissionDenied(
            f"only {w.owner} (the owner), a tenant-admin of {w.tenant} or an admin may do this"
        )
    if w.owner == p.name and not p.can_submit(w.tenant):
        raise PermissionDenied(f"your role in {w.tenant} is read-only")


def cancel(ctx: AppContext, p: Principal, workload_id: str) -> WorkloadOut:
    """Pending work is cancelled at once; active work is stopped and becomes `cancelled`
    when the executor confirms the end (its GPUs stay held until then)."""
    reason = f"cancelled by {p.name}"
    with ctx.store.write() as s:
        repo = WorkloadRepo(s)
        w = repo.get(workload_id)
        _visible_or_403(p, w)
        _may_change(p, w)
        if w.terminal or w.state is S.PREEMPTED:
            raise Conflict(f"workload {workload_id} already ended ({w.state}); nothing to cancel")
        if w.state is S.PENDING:
            repo.change_state(workload_id, S.CANCELLED, ctx.clock.now(), reason)
    if w.active:
        lifecycle.request_stop(ctx, workload_id, S.CANCELLED, reason)
    ctx.wake_scheduler()
    with ctx.store.read() as s:
        return workload_out(WorkloadRepo(s).record(workload_id))


def logs(ctx: AppContext, p: Principal, workload_id: str, tail: int | None) -> LogsOut:
    with ctx.store.read() as s:
        w = WorkloadRepo(s).get(workload_id)
    _visible_or_403(p, w)
    if w.owner != p.name and not p.can_manage(w.tenant):
        raise PermissionDenied(
            f"only {w.owner} (the owner), a tenant-admin of {w.tenant} or an admin "
            "may read its logs"
        )
    if w.state is S.PENDING:
        return LogsOut(workload_id=w.id, state="pending", text="")
    try:
        text = ctx.executor.logs(workload_id, tail)
    except NotSupported as e:
        raise NotFound(str(e)) from None
    except ExecutorError as e:
        raise Conflict(f"cannot read the logs of {workload_id}: {e}") from None
    return LogsOut(workload_id=w.id, state=str(w.state), text=text)  # type: ignore[arg-type]


def queue(ctx: AppContext, p: Principal, tenant: str | None, limit: int = 500) -> list[JSONObject]:
    """The first `limit` pending workloads the caller may see, in queue order, as
    QueueEntryOut JSON objects."""
    with ctx.store.read() as s:
        rows = WorkloadRepo(s).rows(
            states={S.PENDING},
            tenants=p.readable_roots(),
            visible_to_user=p.name,
            tenant=tenant,
            newest_first=False,
        )
    # work the scheduler has not seen yet (no reason stored) goes last, by submission
    rows.sort(key=lambda r: (r.pending_reason is None, r.queue_position or 0, r.submitted_at))
    out = []
    for i, r in enumerate(rows[:limit], 1):
        obj = ctx.views.workload(r)
        if r.pending_reason is None:
            out.append(queue_entry(i, 0, "waiting for the next scheduling cycle", obj))
        else:
            out.append(
                queue_entry(r.queue_position or 0, r.tenant_position or 0, r.pending_reason, obj)
            )
    return out
