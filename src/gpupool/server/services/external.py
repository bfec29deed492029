"""Work submitted through an engine's own API (`EngineEnv.submit`, `EngineEnv.check`,
`EngineEnv.waiting`): a `kubectl apply`d Pod or Job that the engine's admission webhook
checked and its watch then queues.

It is submitted exactly as the API submits (`workloads.submit`: the same checks, the same
refusals) on behalf of the mapped user: the engine's user name itself when a gpupool user of
that name may submit to the tenant, else the tenant's default submitter
`<first segment of the tenant>-default` (made on its first submission, without password or
token: nobody logs in as it; a member of the tenant for this submission only; per-user caps
count every unmapped submission of the tenant together). `check_external` runs the same
checks and stores nothing (not even the default submitter).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from gpupool.api.workloads import WorkloadIn
from gpupool.domain import Membership, Role, User, ValidationError, WorkloadState
from gpupool.engines.common.engine import ExternalAnswer, ExternalWork
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.services import workloads
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.tenancy import UserRepo
from gpupool.store.workloads import WorkloadRepo


def default_submitter(tenant: str) -> str:
    """Who owns a tenant's work whose submitter is no gpupool user of it."""
    return f"{tenant.split('/')[0]}-default"


def principal_of(ctx: AppContext, user: str, tenant: str, make: bool = True) -> Principal:
    """The gpupool principal `user` (an engine's user name) submits to `tenant` as; the
    default submitter is made when missing unless `make` is False."""
    with ctx.store.read() as s:
        users = UserRepo(s)
        found = users.find(user)
        if found is not None:
            p = Principal(found, tuple(users.memberships(found.name)))
            if p.can_submit(tenant):
                return p
    name = default_submitter(tenant)
    with ctx.store.read() as s:
        exists = UserRepo(s).find(name) is not None
    if not exists and make:  # a user without password or token: nobody logs in as it
        try:
            with ctx.store.write() as s:
                UserRepo(s).create(User(name), None, ctx.clock.now())
        except Conflict:
            pass  # made meanwhile by another admission
    return Principal(User(name), (Membership(name, tenant, Role.MEMBER),))


def _body(work: ExternalWork) -> WorkloadIn:
    return WorkloadIn(
        tenant=work.tenant,
        name=work.name[:128],
        engine=work.engine,
        command=list(work.command),
        gpus=work.gpus,
        gpu_model=work.gpu_model,
        cpus=work.cpus,
        memory_mib=work.memory_mib,
        priority=work.priority,
        requeue_on_preemption=work.requeue_on_preemption,
    )


def check_external(ctx: AppContext, work: ExternalWork) -> None:
    """Raise what `submit_external` would raise for `work`; store nothing."""
    p = principal_of(ctx, work.user, work.tenant, make=False)
    workloads.submit(ctx, p, _body(work), dry_run=True)


def submit_external(
    ctx: AppContext, work: ExternalWork, seen: workloads.SubmitInputs | None = None
) -> ExternalAnswer:
    """Queue `work`; raises the API's ValidationError / PermissionDenied with its reason.
    With `work.workload_id` it is queued once: again, it answers with the workload made
    (ValidationError if that id is another object's). `seen`: as `workloads.submit`'s."""
    if work.workload_id is not None:
        with ctx.store.read() as s:
            try:
                made = WorkloadRepo(s).get(work.workload_id)
            except NotFound:
                made = None
        if made is not None:
            if made.command != work.command:
                raise ValidationError(
                    f"workload {work.workload_id} is another object's ({' '.join(made.command)})",
                    "workload_id",
                )
            return ExternalAnswer(made.id, made.owner)
    p = principal_of(ctx, work.user, work.tenant)
    out = workloads.submit(ctx, p, _body(work), workload_id=work.workload_id, seen=seen)
    return ExternalAnswer(out.id, p.name)


def submitter(ctx: AppContext) -> Callable[[ExternalWork], ExternalAnswer]:
    """`submit_external` for one intake pass: its submissions share one
    `workloads.SubmitInputs` (the nodes read once, at the first that checks); call again for
    the next pass, which reads them anew."""
    seen = workloads.SubmitInputs(ctx)
    return lambda work: submit_external(ctx, work, seen)


def waiting_reasons(ctx: AppContext, ids: Collection[str]) -> dict[str, str]:
    """Why each pending workload of `ids` waits: its place in its tenant's line and the
    reason `gpupool queue` shows."""
    want = set(ids)
    if not want:
        return {}
    with ctx.store.read() as s:
        rows = WorkloadRepo(s).rows(states={WorkloadState.PENDING}, newest_first=False)
    out = {}
    for r in rows:
        if r.id not in want:
            continue
        why = r.pending_reason or "waiting for the next scheduling cycle"
        pos = r.tenant_position
        out[r.id] = f"{_ordinal(pos)} in line for {r.tenant}; {why}" if pos else why
    return out


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def withdraw_external(ctx: AppContext, workload_id: str, reason: str) -> None:
    """Cancel `workload_id` if it is still pending (its object is gone from the engine)."""
    try:
        with ctx.store.write() as s:
            repo = WorkloadRepo(s)
            if repo.get(workload_id).state is WorkloadState.PENDING:
                repo.change_state(workload_id, WorkloadState.CANCELLED, ctx.clock.now(), reason)
    except (Conflict, NotFound):
        return  # admitted or gone meanwhile: the executor's start and poll handle it
    ctx.wake_scheduler()
