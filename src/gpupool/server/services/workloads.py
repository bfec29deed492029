"""Workloads: submit (validated so that nothing that can never run enters the queue), list,
show, cancel, and the queue (their logs: services.logs)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from gpupool.domain import (
    ACTIVE_STATES,
    Allocation,
    Node,
    Request,
    TenantTree,
    ValidationError,
    Workload,
    WorkloadKind,
    WorkloadState,
)
from gpupool.domain.commands import (
    LINUX_MAX_ARG_STRLEN,
    ArgLimits,
    check_command,
    check_declared_env,
)
from gpupool.domain.placement import normalize_labels
from gpupool.domain.profiles import Profile
from gpupool.domain.runtime import runtime_policy
from gpupool.engines.common.executor import (
    Executor,
    ExecutorWithMultiNode,
    ExecutorWithSubmitChecks,
    TemplateProblem,
)
from gpupool.engines.common.pool import PoolExecutor
from gpupool.scheduler.feasibility import never_runs
from gpupool.scheduler.types import Policy
from gpupool.scheduler.waits import PlannedPreemption, planned_preemptions
from gpupool.server.auth import principal_for_token
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import PermissionDenied, TooManyRequests
from gpupool.server.schemas.convert import (
    allocation_out,
    event_out,
    preemption_out,
    request_from_in,
    workload_out,
)
from gpupool.server.schemas.workloads import (
    ResourcesIn,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
)
from gpupool.server.services import lifecycle, nodepools, notebooks
from gpupool.server.workload_json import JSONObject, queue_entry, with_preemption
from gpupool.store import (
    AllocationRepo,
    Conflict,
    EventRepo,
    NodeRepo,
    NotFound,
    ProfileRepo,
    TenantRepo,
    WorkloadRecord,
    WorkloadRepo,
    attained_milli_s,
    kept_service,
    new_workload_id,
)

log = logging.getLogger(__name__)
S = WorkloadState
RESOURCE_FIELDS = set(ResourcesIn.model_fields)
#: stored state values of work that holds an allocation
_ACTIVE = frozenset(str(x) for x in ACTIVE_STATES)


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


def check_can_ever_run(
    req: Request, tenant: str, tree: TenantTree, nodes: list[Node], policy: Policy
) -> None:
    """Raise ValidationError if `req` could never run under the scheduler's `policy`: its
    own rule (`gpupool.scheduler.feasibility.never_runs`: hardware no node has, or, under
    `fair`, a limit or per-user cap anywhere on the tenant's chain), in the words the
    scheduler would fail it with, which say what to ask for instead."""
    never = never_runs(req, tenant, tree, nodes, policy)
    if never is not None:
        raise ValidationError(f"this request can never run: {never.why}", never.field)


def check_nodes(ctx: AppContext, s: Session) -> list[Node]:
    """The nodes `check_can_ever_run` counts: those work may run on, and the node pools'
    nodes to come (issue 34)."""
    nodes = [n for n in NodeRepo(s).list() if ctx.runs_work_on(n.name)]
    return nodes + nodepools.reachable_nodes(ctx, s)


class SubmitInputs:
    """The tenant tree and the nodes (`check_nodes`) that submissions check against, each
    read from the store at its first use (in that submission's read transaction) and reused
    by every later submission given the same object: one pass of an engine's intake
    (services.external.submitter) reads the nodes once, not once per submission. It never
    sees a tenant or node changed after its reading: take a new one for each pass (the
    checks are advisory; the insert re-checks that the tenant exists, the scheduler the
    rest)."""

    def __init__(self, ctx: AppContext):
        self.ctx = ctx
        self._tree: TenantTree | None = None
        self._nodes: list[Node] | None = None

    def tree(self, s: Session) -> TenantTree:
        if self._tree is None:
            self._tree = TenantRepo(s).tree()
        return self._tree

    def nodes(self, s: Session) -> list[Node]:
        if self._nodes is None:
            self._nodes = check_nodes(self.ctx, s)
        return self._nodes


def check_multi_node(req: Request, kind: WorkloadKind, supported: bool, engine: str) -> None:
    """Raise ValidationError for a multi-node request the engine or the kind cannot run."""
    if req.nodes == 1:
        return
    if kind is WorkloadKind.NOTEBOOK:
        raise ValidationError(
            "a notebook runs on one node; submit a job for work across several nodes", "nodes"
        )
    if not supported:
        raise ValidationError(
            f"this gpupool runs work with the {engine} engine, on one node; a request across "
            f"{req.nodes} nodes needs an engine that runs one workload across several nodes "
            "(docs/executors.md lists them) — ask for nodes: 1 (at most one node's GPUs)",
            "nodes",
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
    """The request and kind of a submit: its resources, or its profile's; either way with
    the placement pins it gives (`engine`, `node_labels`)."""
    req, kind = _resources(body, profile)
    if body.engine is None and not body.node_labels:
        return req, kind
    pins = normalize_labels(body.node_labels)
    return dataclasses.replace(req, engine=body.engine, node_labels=pins), kind


def _resources(body: WorkloadIn, profile: Profile | None) -> tuple[Request, WorkloadKind]:
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


def check_vouched(ctx: AppContext, service_token: str | None) -> None:
    """Raise PermissionDenied unless `service_token` is an admin's (the hub's): only then is a
    pod template (`pod_spec`) accepted."""
    if not service_token:
        raise PermissionDenied(
            "pod_spec is accepted only from JupyterHub's gpupool spawner: send the hub's "
            "admin token in X-Gpupool-Service-Token"
        )
    if not principal_for_token(ctx, service_token).admin:
        raise PermissionDenied("X-Gpupool-Service-Token must be an admin's token (the hub's)")


def submit(
    ctx: AppContext,
    p: Principal,
    body: WorkloadIn,
    on_insert: Callable[[Session, Workload], None] | None = None,
    *,
    workload_id: str | None = None,
    dry_run: bool = False,
    seen: SubmitInputs | None = None,
) -> WorkloadOut:
    """Validate (in a read transaction), then insert (a short write transaction). The checks
    are advisory: a quota changed in between is caught by the scheduler. `on_insert` runs in
    the insert's transaction (services.idempotency binds its key there). `workload_id`: the
    id to use (an engine's, services.external); `dry_run`: check only, store nothing;
    `seen`: the tenant tree and nodes to check against, shared by several submissions (one
    intake pass); None: read from the store for this one."""
    now = ctx.clock.now()
    check_command(body.command, os_arg_limits(), env=body.env)  # what nothing could launch
    check_declared_env(body.env)
    with ctx.store.read() as s:
        tree = seen.tree(s) if seen is not None else TenantRepo(s).tree()
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
        max_runtime_s = runtime_policy(tree, tenant, profile).apply(body.max_runtime_s)
        req = notebooks.pin_to_hub_engine(ctx, req, kind)
        if body.pod_spec is not None:
            _check_template(ctx.executor, body.pod_spec, kind, body.command, p.name)
        if kind is WorkloadKind.JOB and not body.command:
            raise ValidationError(
                'a job needs a command, e.g. "command": ["python", "train.py"]', "command"
            )
        w = Workload(
            id=workload_id or new_workload_id(),
            tenant=tenant,
            owner=p.name,
            request=req,
            kind=kind,
            priority=body.priority,
            preemptible=body.preemptible,
            requeue_on_preemption=body.requeue_on_preemption,
            checkpointing=body.checkpointing,
            max_runtime_s=max_runtime_s,
            submitted_at=now,
            command=tuple(body.command),
            profile=body.profile,
        )
        w = _on_takers(ctx.executor, w, body.pod_spec)
        req = w.request
        multi = isinstance(ctx.executor, ExecutorWithMultiNode)
        check_multi_node(req, kind, multi, ctx.executor.name)
        nodes = seen.nodes(s) if seen is not None else check_nodes(ctx, s)
        check_can_ever_run(req, tenant, tree, nodes, ctx.settings.scheduler.policy)
    refused = notebooks.one_account_refusal(ctx, w)
    if refused is not None:
        raise PermissionDenied(refused)
    if isinstance(ctx.executor, ExecutorWithSubmitChecks):
        refused = ctx.executor.refusal(w)  # e.g. a notebook JupyterHub must not run
        if refused is not None:
            raise PermissionDenied(refused)
    notebooks.check_has_server(ctx, w, body.pod_spec is not None)
    if dry_run:
        with ctx.store.read() as s:
            check_pending_cap(WorkloadRepo(s), p.name, ctx.settings.max_pending_per_user)
        return workload_out(WorkloadRecord(w, name=body.name))
    with ctx.store.write() as s:
        repo = WorkloadRepo(s)
        if not TenantRepo(s).exists(tenant):
            raise ValidationError(f"tenant {tenant!r} was just deleted", "tenant")
        check_pending_cap(repo, p.name, ctx.settings.max_pending_per_user)
        repo.add(w, name=body.name)
        repo.set_env(w.id, body.env)
        repo.set_pod_spec(w.id, body.pod_spec)
        if on_insert is not None:
            on_insert(s, w)
        rec = repo.record(w.id)
    ctx.wake_scheduler()
    return workload_out(rec)


#: Retry-After of a submit refused for the pending cap: a guess; work starts when GPUs free up
PENDING_CAP_RETRY_S = 60.0


def check_pending_cap(repo: WorkloadRepo, owner: str, cap: int) -> None:
    """Raise TooManyRequests (429) if `owner` already has `cap` pending workloads (review
    F14: one user cannot fill the queue without bound). `cap` 0: no cap."""
    if cap <= 0:
        return
    n = repo.count_pending_of(owner)
    if n >= cap:
        raise TooManyRequests(
            f"you have {n} pending workloads, the most one user may have "
            f"(GPUPOOL_MAX_PENDING_PER_USER={cap}); wait until some start, or cancel some "
            "(gpupool cancel ID, or DELETE /api/v1/workloads/ID), then submit again",
            retry_after_s=PENDING_CAP_RETRY_S,
        )


def _check_template(
    executor: Executor, spec: dict, kind: WorkloadKind, command: list[str], owner: str
) -> None:
    """A notebook's engine template (`pod_spec`) comes only with a notebook without a
    command (the template says what runs), to an engine that takes one
    (`ExecutorWithSubmitChecks.template_problem`: e.g. it mounts no volume but `owner`'s)."""
    if kind is not WorkloadKind.NOTEBOOK or command:
        raise ValidationError("pod_spec is for a notebook without a command", "pod_spec")
    problem: TemplateProblem | None = TemplateProblem(
        f"this gpupool's {executor.name} engine takes no notebook template (pod_spec); "
        "leave pod_spec out",
        "pod_spec",
    )
    if isinstance(executor, ExecutorWithSubmitChecks):
        problem = executor.template_problem(spec, owner)
    if problem is not None:
        raise ValidationError(problem.message, problem.field or "pod_spec")


def _on_takers(executor: Executor, w: Workload, template: dict | None) -> Workload:
    """In a pool of engines: `w` pinned to an engine that takes it where some refuse it
    (`PoolExecutor.on_takers`); a template that no engine `w` may run on takes is refused
    (422). Else `w` unchanged."""
    if not isinstance(executor, PoolExecutor):
        return w
    w = executor.on_takers(w, template)
    refused = executor.refusals(w, template)
    if template is not None and len(refused) == len(executor.eligible(w)):
        why = "; ".join(f"the {name} engine: {it}" for name, it in refused.items())
        raise ValidationError(
            f"no engine this notebook may run on takes its pod_spec ({why})", "pod_spec"
        )
    return w


def visible_or_404(p: Principal, w: Workload) -> Workload:
    """`w`, if `p` may see it; else the very 404 of a workload that does not exist (no
    existence oracle: review F10)."""
    if w.owner != p.name and not p.can_read(w.tenant):
        raise NotFound(f"no workload {w.id!r}; list yours with GET /api/v1/workloads")
    return w


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
        kept = _kept(s, rows)
        plans = planned_preemptions(WorkloadRepo(s).owed_waits()) if active else {}
    objs = ctx.workload_json.workloads(rows, allocs, ctx.clock.now(), kept)
    return [_with_plan(o, plans) for o in objs] if plans else objs


def _with_plan(obj: JSONObject, plans: dict[str, PlannedPreemption]) -> JSONObject:
    """`obj` with its planned preemption, if it is active work a reclaim will take."""
    plan = plans.get(obj["id"])
    return with_preemption(obj, plan) if plan and obj["state"] in _ACTIVE else obj


def planned_preemption(s: Session, w: Workload) -> PlannedPreemption | None:
    """When active `w` will be preempted for work its tenant's guarantee is owed to, as the
    scheduler's latest waits tell (None: no reclaim plans to take it)."""
    if w.state not in _ACTIVE:
        return None
    return planned_preemptions(WorkloadRepo(s).owed_waits()).get(w.id)


def _kept(s: Session, rows: Sequence[Any]) -> dict[str, float]:
    """What the listed workloads kept from earlier attempts (gpupool.store.attained): only
    checkpointing work that was preempted can have kept any, so mostly no query at all."""
    ids = [r.id for r in rows if r.checkpointing and r.preemptions]
    return kept_service(s, workload_ids=ids) if ids else {}


def _attained(s: Session, w: Workload, active: Allocation | None, now: float) -> float:
    """What `w` has attained at `now`, milli-GPU-seconds (gpupool.store.attained)."""
    kept = 0.0
    if w.checkpointing and w.preemptions:
        kept = kept_service(s, workload_ids=[w.id]).get(w.id, 0.0)
    return attained_milli_s(w, kept, active, now)


def get_workload(ctx: AppContext, p: Principal, workload_id: str) -> WorkloadDetailOut:
    with ctx.store.read() as s:
        rec = WorkloadRepo(s).record(workload_id)
        visible_or_404(p, rec.workload)
        last = AllocationRepo(s).last_for(workload_id)
        events = EventRepo(s).list(workload_id=workload_id, limit=1000)
        active = last[0] if last and last[1] is None else None
        attained = _attained(s, rec.workload, active, ctx.clock.now())
        plan = planned_preemption(s, rec.workload)
    alloc = allocation_out(*last) if last else None
    out = workload_out(rec, alloc, attained)
    if plan is not None:
        out.preemption = preemption_out(plan)
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
        visible_or_404(p, w)
        _may_change(p, w)
        if w.terminal or w.state is S.PREEMPTED:
            raise Conflict(f"workload {workload_id} already ended ({w.state}); nothing to cancel")
        if w.state is S.PENDING:
            repo.change_state(workload_id, S.CANCELLED, ctx.clock.now(), reason)
    if w.active:
        lifecycle.request_stop(ctx, workload_id, S.CANCELLED, reason)
    ctx.wake_scheduler()
    with ctx.store.read() as s:
        rec = WorkloadRepo(s).record(workload_id)
        active = AllocationRepo(s).active_for(workload_id) if rec.workload.active else None
        return workload_out(rec, None, _attained(s, rec.workload, active, ctx.clock.now()))


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
        rows = rows[:limit]
        kept = _kept(s, rows)
    out = []
    for i, r in enumerate(rows, 1):
        obj = ctx.workload_json.workload(r, kept)
        if r.pending_reason is None:
            out.append(queue_entry(i, 0, "waiting for the next scheduling cycle", obj))
        else:
            out.append(
                queue_entry(r.queue_position or 0, r.tenant_position or 0, r.pending_reason, obj)
            )
    return out
