"""Budgets, advance reservations and chargeback over the wire (issue 35 parts 2-4)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupool.api.base import INT32_MAX, In, Out
from gpupool.api.csvtext import csv_text

BudgetPeriodName = Literal["month", "quarter"]
#: the latest time a reservation may name: 9999-12-31 23:59:59 UTC
MAX_TIME = 253_402_300_799.0
BudgetModeName = Literal["warn", "borrow-only", "hold"]


class BudgetIn(In):
    """Create or replace the budget of (tenant, period, model)."""

    tenant: str = Field(max_length=255)
    period: BudgetPeriodName = "month"
    #: GPU-hours per period (>= 0; fractions and MIG instances count their share)
    gpu_hours: float = Field(ge=0, le=1e12, description="GPU-hours per period, 0 or more")
    mode: BudgetModeName = "warn"
    #: count and limit only this GPU model (null: every model)
    model: str | None = Field(default=None, max_length=128)


class BudgetOut(Out):
    id: int
    tenant: str
    period: BudgetPeriodName
    model: str | None
    gpu_hours: float
    mode: BudgetModeName
    #: GPU-hours allocated to the tenant's subtree (on `model`) in the current period
    used_gpu_hours: float
    #: "2026-11" or "2026-Q4" (UTC calendar periods)
    period_label: str
    period_start: float
    #: when the current period ends and the budget resets (epoch seconds, UTC midnight)
    resets_at: float
    over: bool


class ReservationIn(In):
    """Book `gpus` whole GPUs (of `model`) for `tenant` (or only `users` of it) over
    [start, end) in epoch seconds."""

    tenant: str = Field(max_length=255)
    gpus: int = Field(ge=1, le=INT32_MAX)
    model: str | None = Field(default=None, max_length=128)
    start: float = Field(ge=0, le=MAX_TIME, description="epoch seconds (UTC)")
    end: float = Field(ge=0, le=MAX_TIME, description="epoch seconds (UTC)")
    users: list[str] = Field(default_factory=list, max_length=1000)
    nodes: list[str] = Field(default_factory=list, max_length=1000)
    name: str = Field(default="", max_length=128)


class ReservationOut(Out):
    id: str
    name: str
    tenant: str
    users: list[str]
    model: str | None
    gpus: int
    nodes: list[str]
    start: float
    end: float
    created_by: str
    #: upcoming, active or over
    state: Literal["upcoming", "active", "over"]
    #: the GPUs it keeps now, "node:index" (fewer than `gpus` if the pool lacks them)
    kept: list[str]


class ChargeOut(Out):
    key: str
    gpu_hours_allocated: float
    gpu_hours_busy: float
    #: GPU-hours telemetry measured (busy and memory are known for these only)
    gpu_hours_measured: float
    #: GPU-hours whose busy time telemetry estimated rather than measured: MPS shares whose
    #: GPU's MPS work NVML reports only as a whole, split by share (docs/telemetry.md)
    gpu_hours_estimated: float = 0.0
    gpu_memory_gib_hours: float
    #: kWh from the GPUs' energy counters, apportioned to holders by share; null: none
    #: recorded for this key ("n/a")
    energy_kwh: float | None = None
    workloads: int


class ChargebackOut(Out):
    by: Literal["tenant", "user", "model"]
    from_day: str | None = None
    to_day: str | None = None
    rows: list[ChargeOut]
    total: ChargeOut


CSV_COLUMNS = (
    "key",
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "gpu_hours_measured",
    "gpu_memory_gib_hours",
    "energy_kwh",
    "workloads",
    "gpu_hours_estimated",  # last: the columns before it keep their places
)


def chargeback_csv(rep: ChargebackOut) -> str:
    """The report as CSV, one row per key then the total; energy 'n/a' where not recorded.
    Keys are others' text (tenant, user and GPU model names): `csv_text` keeps a key that
    would start a formula from being one."""
    rows: list[list[str | int | float | None]] = [
        [rep.by if c == "key" else c for c in CSV_COLUMNS]
    ]
    for r in [*rep.rows, rep.total]:
        rows.append(
            [
                r.key,
                f"{r.gpu_hours_allocated:.6f}",
                f"{r.gpu_hours_busy:.6f}",
                f"{r.gpu_hours_measured:.6f}",
                f"{r.gpu_memory_gib_hours:.6f}",
                "n/a" if r.energy_kwh is None else f"{r.energy_kwh:.6f}",
                r.workloads,
                f"{r.gpu_hours_estimated:.6f}",
            ]
        )
    return csv_text(rows)
