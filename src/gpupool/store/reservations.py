"""Advance reservations (gpupool.domain.reservations): rows and repository."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpupool.domain.reservations import Reservation
from gpupool.store.errors import NotFound
from gpupool.store.rows import Base


class ReservationRow(Base):
    __tablename__ = "reservations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name", ondelete="CASCADE"), index=True)
    users: Mapped[list[Any]] = mapped_column(JSON, default=list)
    model: Mapped[str | None] = mapped_column(String(128))
    gpus: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    start: Mapped[float] = mapped_column(Float, index=True)
    end: Mapped[float] = mapped_column(Float, index=True)
    created_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


def no_reservation(rid: str) -> NotFound:
    """The answer for an unknown reservation id (and for one the asker may not read)."""
    return NotFound(f"no reservation {rid!r}; see `gpupool reservation ls`")


def new_reservation_id() -> str:
    return "r-" + secrets.token_hex(4)


def reservation_of(r: ReservationRow) -> Reservation:
    return Reservation(
        id=r.id,
        tenant=r.tenant,
        gpus=r.gpus,
        start=r.start,
        end=r.end,
        model=r.model,
        users=tuple(r.users or ()),
        nodes=tuple(r.nodes or ()),
        name=r.name,
        created_by=r.created_by,
    )


class ReservationRepo:
    def __init__(self, s: Session):
        self.s = s

    def list(self, *, after: float | None = None) -> list[Reservation]:
        """By start; `after`: only those that end later."""
        q = select(ReservationRow).order_by(ReservationRow.start, ReservationRow.id)
        if after is not None:
            q = q.where(ReservationRow.end > after)
        return [reservation_of(r) for r in self.s.scalars(q)]

    def get(self, rid: str) -> Reservation:
        r = self.s.get(ReservationRow, rid)
        if r is None:
            raise no_reservation(rid)
        return reservation_of(r)

    def add(self, r: Reservation, now: float) -> None:
        self.s.add(
            ReservationRow(
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
                created_at=now,
            )
        )
        self.s.flush()

    def delete(self, rid: str) -> None:
        r = self.s.get(ReservationRow, rid)
        if r is None:
            raise no_reservation(rid)
        self.s.delete(r)
