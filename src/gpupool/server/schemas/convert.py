"""Converters between domain values and API schemas."""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.domain import (
    MILLI_PER_GPU,
    Allocation,
    Event,
    Membership,
    Quota,
    Request,
    Share,
    User,
    ValidationError,
)
from gpupool.domain.profiles import Profile
from gpupool.scheduler.types import Wait
from gpupool.scheduler.waits import PlannedPreemption
from gpupool.server.schemas.cluster import HolderOut
from gpupool.server.schemas.tenancy import MembershipOut, QuotaIO, UserOut
from gpupool.server.schemas.workloads import (
    AllocationOut,
    EventOut,
    ForecastOut,
    PendingOut,
    PreemptionOut,
    ProfileOut,
    RequestOut,
    ResourcesIn,
    ShareOut,
    WaitOut,
    WorkloadOut,
)
from gpupool.sim.forecast import Forecast, forecast_text
from gpupool.store import WorkloadRecord, gpu_hours
from gpupool.store import attained_milli_s as store_attained_milli_s


def request_from_in(r: ResourcesIn) -> Request:
    """Build a domain Request; domain rules raise ValidationError naming the field."""
    gpus = r.gpus
    if r.gpus_per_node is not None:
        if gpus and gpus != r.nodes * r.gpus_per_node:
            raise ValidationError(
                f"gpus {gpus} is not nodes x gpus_per_node ({r.nodes * r.gpus_per_node}); "
                "give gpus_per_node alone",
                "gpus",
            )
        gpus = r.nodes * r.gpus_per_node
    elif r.nodes > 1 and not gpus:
        raise ValidationError(
            f"a request across {r.nodes} nodes needs gpus_per_node (whole GPUs on each node)",
            "gpus_per_node",
        )
    return Request(
        gpus=gpus,
        nodes=r.nodes,
        gpu_milli=0 if r.gpu_fraction is None else _fraction_milli(r.gpu_fraction),
        gpu_memory_mib=r.gpu_memory_mib,
        gpu_model=r.gpu_model,
        cpu_milli=int(round(r.cpus * 1000)),
        memory_mib=r.memory_mib,
        mig=r.mig,
    )


def _fraction_milli(f: float) -> int:
    milli = int(round(f * MILLI_PER_GPU))
    if not 0 < milli < MILLI_PER_GPU:
        raise ValidationError(
            f"gpu_fraction {f:g} rounds to {milli / 1000:g}; use a value between 0.001 and 0.999",
            "gpu_fraction",
        )
    return milli


def request_out(r: Request) -> RequestOut:
    return RequestOut(
        gpus=r.gpus,
        gpu_fraction=r.gpu_milli / MILLI_PER_GPU if r.gpu_milli else None,
        nodes=r.nodes,
        gpus_per_node=r.gpus_per_node,
        gpu_memory_mib=r.gpu_memory_mib,
        gpu_model=r.gpu_model,
        cpus=r.cpu_milli / 1000,
        memory_mib=r.memory_mib,
        mig=r.mig,
        engine=r.engine,
        node_labels=dict(r.node_labels),
        description=r.describe(),
    )


def share_out(s: Share) -> ShareOut:
    return ShareOut(
        node=s.node,
        gpu_index=s.gpu_index,
        gpu_uuid=s.gpu_uuid,
        milli=s.milli,
        memory_mib=s.memory_mib,
        enforcement=str(s.enforcement),  # type: ignore[arg-type]
        mig_profile=s.mig_profile,
        mig_start=s.mig_start,
    )


def allocation_out(a: Allocation, released_at: float | None = None) -> AllocationOut:
    return AllocationOut(
        node=a.node,
        nodes=list(a.nodes),
        since=a.since,
        released_at=released_at,
        gpu_uuids=list(a.gpu_uuids),
        shares=[share_out(s) for s in a.shares],
    )


def workload_out(
    rec: WorkloadRecord,
    allocation: AllocationOut | None = None,
    attained_milli_s: float | None = None,
) -> WorkloadOut:
    """The API object of a stored workload. `attained_milli_s`: its attained service
    (gpupool.store.attained); None: what its row alone tells (the last attempt of ended work;
    nothing kept, nothing current)."""
    w = rec.workload
    if attained_milli_s is None:
        attained_milli_s = store_attained_milli_s(w)
    return WorkloadOut(
        id=w.id,
        name=rec.name,
        tenant=w.tenant,
        owner=w.owner,
        kind=str(w.kind),  # type: ignore[arg-type]
        state=str(w.state),  # type: ignore[arg-type]
        request=request_out(w.request),
        command=list(w.command),
        profile=w.profile,
        priority=w.priority,
        preemptible=w.preemptible,
        requeue_on_preemption=w.requeue_on_preemption,
        checkpointing=w.checkpointing,
        max_runtime_s=w.max_runtime_s,
        submitted_at=w.submitted_at,
        admitted_at=w.admitted_at,
        started_at=w.started_at,
        finished_at=w.finished_at,
        exit_code=w.exit_code,
        reason=w.reason,
        preemptions=w.preemptions,
        attained_gpu_hours=gpu_hours(attained_milli_s),
        pending=None
        if rec.pending is None
        else PendingOut(
            reason=rec.pending.reason,
            position=rec.pending.position,
            tenant_position=rec.pending.tenant_position,
            wait=None if rec.pending.wait is None else wait_out(rec.pending.wait),
            forecast=None if rec.forecast is None else forecast_out(rec.forecast),
        ),
        allocation=allocation,
        endpoint=rec.endpoint,
    )


def iso_time(t: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC ('2026-11-25T10:42:05Z'), None for None."""
    if t is None:
        return None
    return datetime.fromtimestamp(round(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def preemption_out(p: PlannedPreemption) -> PreemptionOut:
    return PreemptionOut(
        at=iso_time(p.at) or "",
        for_tenant=p.for_tenant,
        for_workload=p.for_workload,
        reason=p.reason,
    )


def forecast_out(f: Forecast) -> ForecastOut:
    return ForecastOut(
        expected=iso_time(f.expected),
        latest=iso_time(f.latest),
        until=iso_time(f.until) or "",
        made_at=iso_time(f.made_at) or "",
        text=forecast_text(f),
        basis=f.basis,
        runtime_s=round(f.runtime_s),
        runtime_basis=f.runtime_basis,
    )


def wait_out(w: Wait) -> WaitOut:
    return WaitOut(
        kind=str(w.kind),  # type: ignore[arg-type]
        owed_gpus=w.owed_milli / MILLI_PER_GPU if w.owed_milli else None,
        victims=list(w.victims),
        until=iso_time(w.until),
        node=w.node,
        expected_start=iso_time(w.expected_start),
    )


def event_out(event_id: int, e: Event) -> EventOut:
    return EventOut(
        id=event_id,
        at=e.at,
        kind=e.kind,
        message=e.message,
        workload_id=e.workload_id,
        tenant=e.tenant,
        user=e.user,
        data=dict(e.data),
    )


def quota_out(q: Quota) -> QuotaIO:
    return QuotaIO(
        guaranteed=q.guaranteed_milli / 1000,
        limit=None if q.limit_milli is None else q.limit_milli / 1000,
        weight=q.weight,
        max_per_user=None if q.max_milli_per_user is None else q.max_milli_per_user / 1000,
        guaranteed_by_model={m: v / 1000 for m, v in q.guaranteed_by_model.items()},
    )


def quota_from_in(q: QuotaIO) -> Quota:
    return Quota.gpus(
        guaranteed=q.guaranteed,
        limit=q.limit,
        weight=q.weight,
        max_per_user=q.max_per_user,
        by_model=dict(q.guaranteed_by_model),
    )


def user_out(u: User, memberships: list[Membership]) -> UserOut:
    return UserOut(
        name=u.name,
        admin=u.admin,
        unix_user=u.unix_user,
        memberships=[
            MembershipOut(user=m.user, tenant=m.tenant, role=str(m.role))  # type: ignore[arg-type]
            for m in memberships
        ],
    )


def holder_out(s: Share, workload_id: str, tenant: str, user: str) -> HolderOut:
    return HolderOut(
        workload_id=workload_id,
        tenant=tenant,
        user=user,
        milli=s.milli,
        memory_mib=s.memory_mib,
        enforcement=str(s.enforcement),
        mig_profile=s.mig_profile,
        mig_start=s.mig_start,
    )


def profile_out(p: Profile) -> ProfileOut:
    return ProfileOut(
        name=p.name,
        description=p.description,
        kind=str(p.kind),  # type: ignore[arg-type]
        image=p.image,
        tenants=list(p.tenants),
        request=request_out(p.request),
        default_runtime_s=p.default_runtime_s,
        max_runtime_s=p.max_runtime_s,
    )
