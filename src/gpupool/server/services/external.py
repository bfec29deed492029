"""Work submitted through an engine's own API (`EngineEnv.submit`, `EngineEnv.waiting`): a
`kubectl apply`d Pod or Job that the engine's admission webhook hands to gpupool.

It is submitted exactly as the API submits (`workloads.submit`: the same checks, the same
refusals) on behalf of the mapped user: the engine's user name itself when a gpupool user of
that name may submit to the tenant, else the tenant's default submitter
`<first segment of the tenant>-default` (made on first use, without password or token:
nobody logs in as it; a member of the tenant for this submission only; per-user caps count
every unmapped submission of the tenant together).
"""

from __future__ import annotations

from collections.abc import Collection

from gpupool.api.workloads import WorkloadIn
from gpupool.domain import Membership, Role, User, WorkloadState
from gpupool.engines.common.engine import ExternalAnswer, ExternalWork
from gpupool.server.auth import Principal
from gpupool.server.context import AppContext
from gpupool.server.services import workloads
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.tenancy import UserRepo
from gpupool.store.workloads import WorkloadRepo


def default_submitter(tenant: str) -> str:
    """Who owns a tenant's work whose submitter is no gpupool user of it."""
    return f"{tenant.split('/')[0]}-default"


def principal_of(ctx: AppContext, user: str, tenant: str) -> Principal:
    """The gpupool principal `user` (an engine's user name) submits to `tenant` as."""
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
    if not exists:  # a user without password or token: nobody logs in as it
        try:
            with ctx.store.write() as s:
                UserRepo(s).create(User(name), None, ctx.clock.now())
        except Conflict:
            pass  # made meanwhile by another admission
    return Principal(User(name), (Membership(name, tenant, Role.MEMBER),))


def submit_external(ctx: AppContext, work: ExternalWork) -> ExternalAnswer:
    """Queue `work`; raises the API's ValidationError / PermissionDenied with its reason."""
    p = principal_of(ctx, work.user, work.tenant)
    body = WorkloadIn(
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
    out = workloads.submit(ctx, p, body)
    return ExternalAnswer(out.id, p.name)


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
