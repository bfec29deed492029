"""Usage reports and the event log, limited to what the caller may read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

from gpupool.domain import ValidationError
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.schemas.convert import event_out
from gpupool.server.schemas.workloads import EventOut, UsageOut, UsageReportOut
from gpupool.store import EventRepo, UsageRepo


def _day(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValidationError(
            f"{field} must be a date like 2026-01-31, got {value!r}", field
        ) from None


@dataclass(frozen=True, slots=True)
class ReportScope:
    """What a usage report (usage, chargeback) covers: days in [from_day, to_day] (None:
    open), the subtrees of `tenants` (None: all) and one `user`'s rows (None: everyone's)."""

    from_day: str | None
    to_day: str | None
    tenants: list[str] | None
    user: str | None


def report_scope(
    p: Principal,
    from_day: str | None,
    to_day: str | None,
    tenant: str | None,
    user: str | None = None,
) -> ReportScope:
    """The days asked for, checked, and what `p` may read of them: `tenant`'s subtree (p must
    read it), else the tenants p has a role in (all for admins); a user with no tenant role
    sees only their own usage. `user` keeps one user's rows."""
    f, t = _day(from_day, "from"), _day(to_day, "to")
    if f and t and f > t:
        raise ValidationError(f"'from' ({f}) is after 'to' ({t}); swap them", "from")
    roots = p.readable_roots()
    if tenant is not None:
        p.require_read(tenant)
        roots = [tenant]
    if roots is not None and not roots and user in (None, p.name):
        user = p.name  # no tenant role: only your own usage
        roots = None
    return ReportScope(f, t, roots, user)


def usage(
    ctx: AppContext,
    p: Principal,
    group_by: Literal["user", "tenant", "day"],
    from_day: str | None,
    to_day: str | None,
    tenant: str | None,
    user: str | None,
) -> UsageReportOut:
    sc = report_scope(p, from_day, to_day, tenant, user)
    with ctx.store.read() as s:
        totals = UsageRepo(s).rollup(
            group_by, from_day=sc.from_day, to_day=sc.to_day, tenants=sc.tenants, user=sc.user
        )
    rows = [
        UsageOut(
            key=x.key,
            gpu_hours_allocated=x.gpu_seconds_allocated / 3600,
            gpu_hours_busy=x.gpu_seconds_busy / 3600,
            gpu_seconds_allocated=x.gpu_seconds_allocated,
            gpu_seconds_busy=x.gpu_seconds_busy,
            gpu_seconds_measured=x.gpu_seconds_measured,
            gpu_seconds_estimated=x.gpu_seconds_estimated,
            efficiency=x.efficiency,
            gpu_memory_mib_max=x.gpu_memory_mib_max,
            gpu_memory_gib_hours=x.gpu_memory_mib_seconds / 1024 / 3600,
            workloads=x.workloads,
        )
        for x in totals
    ]
    return UsageReportOut(group_by=group_by, from_day=sc.from_day, to_day=sc.to_day, rows=rows)


def events(
    ctx: AppContext,
    p: Principal,
    *,
    workload_id: str | None,
    tenant: str | None,
    kind: str | None,
    since: float | None,
    limit: int,
) -> list[EventOut]:
    roots = p.readable_roots()
    if tenant is not None:
        p.require_read(tenant)
        roots = [tenant]
    with ctx.store.read() as s:
        found = EventRepo(s).list(
            workload_id=workload_id,
            tenants=roots,
            user=p.name if roots is not None and tenant is None else None,
            kind=kind,
            since=since,
            limit=limit,
        )
    return [event_out(i, e) for i, e in found]
