"""Advance reservations: admins book GPUs for a tenant (or some of its users) over a window;
a tenant-admin may book for its tenant too. Everyone sees the reservations of the tenants
they have a role in."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from gpupool.api.budgets import ReservationIn, ReservationOut
from gpupool.domain import Event, Node, ValidationError
from gpupool.domain.budgets import utc_text
from gpupool.domain.reservations import Reservation
from gpupool.domain.tenancy import in_subtree
from gpupool.scheduler.advance import assign, planned_stops, shortfall, stop_notice_text
from gpupool.scheduler.feasibility import grant_problem
from gpupool.scheduler.limits import gpus_text
from gpupool.scheduler.types import RunningWorkload
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.store import (
    Conflict,
    EventRepo,
    NodeRepo,
    ReservationRepo,
    TenantRepo,
    UserRepo,
    new_reservation_id,
)
from gpupool.store.reservations import no_reservation

#: a start this far in the past is still taken as "now" (clocks differ a little)
PAST_SLACK_S = 60.0


def _state(r: Reservation, now: float) -> str:
    return "upcoming" if now < r.start else "active" if now < r.end else "over"


def reservation_out(
    r: Reservation, kept: tuple[tuple[str, int], ...], now: float
) -> ReservationOut:
    return ReservationOut(
        id=r.id,
        name=r.name,
        tenant=r.tenant,
        users=list(r.users),
        model=r.model,
        gpus=r.gpus,
        nodes=list(r.nodes),
        start=r.start,
        end=r.end,
        created_by=r.created_by,
        state=_state(r, now),  # type: ignore[arg-type]
        kept=[f"{n}:{i}" for n, i in kept],
    )


def _nodes(ctx: AppContext, s: Session) -> tuple[Node, ...]:
    return tuple(n for n in NodeRepo(s).list() if ctx.runs_work_on(n.name))


def list_reservations(ctx: AppContext, p: Principal, past: bool) -> list[ReservationOut]:
    now = ctx.clock.now()
    with ctx.store.read() as s:
        every = ReservationRepo(s).list()
        nodes = _nodes(ctx, s)
    live = [r for r in every if r.end > now]
    kept = assign(live, nodes)
    roots = p.readable_roots()
    return [
        reservation_out(r, kept.get(r.id, ()), now)
        for r in every
        if (past or r.end > now) and (roots is None or p.can_read(r.tenant))
    ]


def _check_users(users: UserRepo, r: Reservation) -> None:
    """Each of `r.users` must hold a role in the reservation's tenant: on it, on a tenant
    below it (their work there is the reservation's) or on one above it (the role reaches
    down), by exact path. A name that is no user and a user of other tenants only get the
    same answer, so a tenant-admin learns nothing about users outside their tenants."""
    for u in r.users:
        held = users.memberships(u)  # none for a name that is no user: one query either way
        if not any(in_subtree(m.tenant, r.tenant) or in_subtree(r.tenant, m.tenant) for m in held):
            raise ValidationError(
                f"{u!r} is not a user of tenant {r.tenant}: give users with a role in it or a "
                f"tenant below it (`gpupool user add-to-tenant NAME {r.tenant}`)",
                "users",
            )


def add_reservation(ctx: AppContext, p: Principal, body: ReservationIn) -> ReservationOut:
    p.require_manage(body.tenant, "book GPUs for it")
    now = ctx.clock.now()
    r = Reservation(
        id=new_reservation_id(),
        tenant=body.tenant,
        gpus=body.gpus,
        start=body.start,
        end=body.end,
        model=body.model or None,
        users=tuple(dict.fromkeys(body.users)),
        nodes=tuple(dict.fromkeys(body.nodes)),
        name=body.name,
        created_by=p.name,
    )
    if r.start < now - PAST_SLACK_S:
        raise ValidationError(
            f"the window starts in the past ({utc_text(r.start)}; it is {utc_text(now)}); "
            "give a start from now on",
            "start",
        )
    with ctx.store.write() as s:
        tree = TenantRepo(s).tree()
        nodes = _nodes(ctx, s)
        _check_users(UserRepo(s), r)
        names = {n.name for n in nodes}
        for n in r.nodes:
            if n not in names:
                raise ValidationError(f"unknown node {n!r}; see `gpupool nodes`", "nodes")
        grant = grant_problem(tree, nodes, r.tenant, r.gpus, r.model)
        if grant.why is not None:
            raise ValidationError(grant.why, grant.field or "gpus")
        others = ReservationRepo(s).list(after=now)
        mine = [o for o in others if o.tenant == r.tenant and o.start < r.end and r.start < o.end]
        booked = sum(o.gpus for o in mine) * 1000
        if not grant.within_guarantee(r.gpus * 1000 + booked):
            also = f" beside the {gpus_text(booked)} it has booked then" if mine else ""
            raise ValidationError(
                f"{gpus_text(r.gpus * 1000)}{also} is larger than tenant {r.tenant}'s "
                f"guarantee ({gpus_text(grant.guaranteed_milli)}) allows; book fewer, or ask an "
                "admin to raise its guarantee (`gpupool tenant set --guaranteed`)",
                "gpus",
            )
        why = shortfall(r, others, nodes)
        if why is not None:
            raise Conflict(why)
        ReservationRepo(s).add(r, now)
        EventRepo(s).add(
            Event(
                now,
                "reservation.added",
                f"{p.name} booked {r.gpus}{' ' + r.model if r.model else ''} GPUs for "
                f"{r.tenant} from {utc_text(r.start)} to {utc_text(r.end)} ({r.label})",
                tenant=r.tenant,
                user=p.name,
                data={"reservation": r.id},
            )
        )
        kept = assign([*others, r], nodes).get(r.id, ())
    ctx.wake_scheduler()
    return reservation_out(r, kept, now)


def delete_reservation(ctx: AppContext, p: Principal, rid: str) -> None:
    with ctx.store.write() as s:
        repo = ReservationRepo(s)
        r = repo.get(rid)
        if not p.can_read(r.tenant):  # the same answer as for an unknown id
            raise no_reservation(rid)
        p.require_manage(r.tenant, "cancel its reservations")
        repo.delete(rid)
        EventRepo(s).add(
            Event(
                ctx.clock.now(),
                "reservation.removed",
                f"{p.name} cancelled reservation {r.label} of {r.tenant}",
                tenant=r.tenant,
                user=p.name,
                data={"reservation": r.id},
            )
        )
    ctx.wake_scheduler()


#: how long before a reservation's start the work it will stop is told
NOTICE_S = 600.0


def notify_stops(
    s: Session,
    reservations: Sequence[Reservation],
    nodes: Sequence[Node],
    running: Sequence[RunningWorkload],
    now: float,
) -> int:
    """A `workload.reservation_notice` event, once (the events table remembers across
    restarts), for running work a reservation starting within `NOTICE_S` will stop; how
    many were added."""
    events = EventRepo(s)
    added = 0
    for rw, r in planned_stops(reservations, nodes, running, now, NOTICE_S):
        w = rw.workload
        told = events.list(workload_id=w.id, kind="workload.reservation_notice", limit=50)
        if any(e.data.get("reservation") == r.id for _, e in told):
            continue
        events.add(
            Event(
                now,
                "workload.reservation_notice",
                stop_notice_text(r),
                workload_id=w.id,
                tenant=w.tenant,
                user=w.owner,
                data={"reservation": r.id, "at": r.start},
            )
        )
        added += 1
    return added
