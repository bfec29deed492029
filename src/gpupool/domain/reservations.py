"""Advance reservations: N GPUs (of a model) booked for a tenant, or some of its users, for
a time window. The scheduler keeps them (gpupool.scheduler.advance); pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpupool.domain.errors import ValidationError
from gpupool.domain.tenancy import in_subtree
from gpupool.domain.workloads import Workload


@dataclass(frozen=True, slots=True)
class Reservation:
    """`gpus` whole GPUs (of `model`, any model when None; on `nodes` only, when given) for
    `tenant`'s subtree, or only its `users` when given, from `start` to `end` (epoch s)."""

    id: str
    tenant: str
    gpus: int
    start: float
    end: float
    model: str | None = None
    users: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    name: str = ""
    created_by: str = ""

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValidationError(f"a reservation books 1 or more GPUs, got {self.gpus}", "gpus")
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValidationError("start and end must be times", "start")
        if self.end <= self.start:
            raise ValidationError(
                "the window has no length: end must be after start (give --end or --hours)",
                "end",
            )
        if self.model == "":
            object.__setattr__(self, "model", None)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.id})" if self.name else self.id

    def holds(self, w: Workload) -> bool:
        """Whether `w` is the reservation's to run: its tenant's subtree and, when users are
        named, one of them."""
        return in_subtree(w.tenant, self.tenant) and (not self.users or w.owner in self.users)

    def on(self, now: float) -> bool:
        """The window is open at `now`."""
        return self.start <= now < self.end
