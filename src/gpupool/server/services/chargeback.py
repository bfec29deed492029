"""Chargeback: GPU-hours allocated and busy, memory GiB-hours and energy per tenant, user or
GPU model over a range of UTC days, limited to what the caller may read.

Energy: kWh from the GPUs' energy counters as the energy loop recorded them
(gpupool.server.loops.energy), apportioned by share; null ("n/a") for a key with no energy
recorded (GPUs no sampler of the server reads, or no counter); never estimated.
"""

from __future__ import annotations

from typing import Literal

from gpupool.api.budgets import ChargebackOut, ChargeOut
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.services.reports import report_scope
from gpupool.store import ChargebackRepo, ChargeRow

By = Literal["tenant", "user", "model"]


def _out(
    key: str, a: float, b: float, m: float, e: float, mem: float, n: int, joules: float | None
) -> ChargeOut:
    return ChargeOut(
        key=key,
        gpu_hours_allocated=a / 3600,
        gpu_hours_busy=b / 3600,
        gpu_hours_measured=m / 3600,
        gpu_hours_estimated=e / 3600,
        gpu_memory_gib_hours=mem / 1024 / 3600,
        energy_kwh=None if joules is None else joules / 3.6e6,
        workloads=n,
    )


def report(
    ctx: AppContext,
    p: Principal,
    by: By,
    from_day: str | None,
    to_day: str | None,
    tenant: str | None,
) -> ChargebackOut:
    sc = report_scope(p, from_day, to_day, tenant)
    with ctx.store.read() as s:
        rows: list[ChargeRow] = ChargebackRepo(s).report(
            by, from_day=sc.from_day, to_day=sc.to_day, tenants=sc.tenants, user=sc.user
        )
    out = [
        _out(
            r.key,
            r.gpu_seconds_allocated,
            r.gpu_seconds_busy,
            r.gpu_seconds_measured,
            r.gpu_seconds_estimated,
            r.gpu_memory_mib_seconds,
            r.workloads,
            r.energy_joules,
        )
        for r in rows
    ]
    measured = [r.energy_joules for r in rows if r.energy_joules is not None]
    total = _out(
        "total",
        sum(r.gpu_seconds_allocated for r in rows),
        sum(r.gpu_seconds_busy for r in rows),
        sum(r.gpu_seconds_measured for r in rows),
        sum(r.gpu_seconds_estimated for r in rows),
        sum(r.gpu_memory_mib_seconds for r in rows),
        sum(r.workloads for r in rows),
        sum(measured) if measured else None,
    )
    return ChargebackOut(by=by, from_day=sc.from_day, to_day=sc.to_day, rows=out, total=total)
