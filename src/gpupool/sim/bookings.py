"""Advance reservations in a scenario file (`reservations:`, docs/scenarios.md): parsed and
checked the way the API checks them (a window of length zero, more GPUs than the tenant's
guarantee allows, overlapping another on the same GPUs), then replayed by the simulator
through the same pure code as the server (gpupool.scheduler.timed)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain import MILLI_PER_GPU, DomainError, Node, TenantTree
from gpupool.domain.reservations import Reservation
from gpupool.scheduler.advance import shortfall
from gpupool.scheduler.feasibility import grant_problem
from gpupool.sim.scenario_errors import ScenarioError


class ReservationSpec(BaseModel):
    """`gpus` whole GPUs (of `gpu_model`) for `tenant` (or only `users`) from `start` for
    `duration` seconds (or until `end`), in the scenario's seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    gpus: int = Field(ge=1)
    gpu_model: str | None = None
    start: float = Field(ge=0)
    end: float | None = Field(default=None, ge=0)
    duration: float | None = Field(default=None, ge=0)
    users: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)


def build_reservations(
    specs: Sequence[ReservationSpec], tenants: TenantTree, nodes: Sequence[Node]
) -> tuple[Reservation, ...]:
    """The reservations, or ScenarioError listing every problem (one line each)."""
    problems: list[str] = []
    out: list[Reservation] = []
    for i, s in enumerate(specs):
        where = f"reservations[{i}] (id {s.id})"
        if (s.end is None) == (s.duration is None):
            problems.append(f"{where}: give end or duration (one of them)")
            continue
        end = s.end if s.end is not None else s.start + (s.duration or 0.0)
        try:
            r = Reservation(
                s.id, s.tenant, s.gpus, s.start, end, s.gpu_model, tuple(s.users), tuple(s.nodes)
            )
        except DomainError as e:
            problems.append(f"{where}: {e}")
            continue
        grant = grant_problem(tenants, nodes, r.tenant, r.gpus, r.model)
        if grant.why is not None:
            problems.append(f"{where}: {grant.why}")
            continue
        mine = sum(
            o.gpus for o in out if o.tenant == r.tenant and o.start < end and r.start < o.end
        )
        if not grant.within_guarantee((r.gpus + mine) * MILLI_PER_GPU):
            g = grant.guaranteed_milli / MILLI_PER_GPU
            problems.append(
                f"{where}: {r.gpus + mine} GPUs at once is larger than tenant {r.tenant}'s "
                f"guarantee ({g:g} GPUs) allows"
            )
            continue
        why = shortfall(r, out, nodes)
        if why is not None:
            problems.append(f"{where}: {why}")
            continue
        out.append(r)
    if len({r.id for r in out}) != len(out):
        problems.append("reservations: ids must be unique")
    if problems:
        raise ScenarioError(problems)
    return tuple(out)
