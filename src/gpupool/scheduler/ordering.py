"""Queue order for each policy.

* inside a tenant (fair, las): higher priority first, then earlier submit time, then id;
  under fair with service levels, the service level comes before the submit time;
* fifo: one global queue by submit time, then id (priority and tenants ignored);
* fair: tenants below their guarantee first, by allocated / fair share, lowest first; then
  the borrowers, by `borrow_order`: least attained service per unit of weight first
  (`service`), or allocated / fair share (`usage`); re-ranked after every admission;
* las: tenants by attained GPU-service, least first; inside a tenant, jobs with the least
  attained service first (when the snapshot lists per-workload service under the workload id).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain import Workload

INF = float("inf")
_NONE: Mapping[str, float] = {}


def in_tenant_key(w: Workload) -> tuple:
    return (-w.priority, w.submitted_at, w.id)


def leveled_in_tenant_key(w: Workload, level: int = 0) -> tuple:
    """Inside a tenant under `fair` with service levels: priority, then the workload's
    service level (gpupool.scheduler.levels), then submit time and id."""
    return (-w.priority, level, w.submitted_at, w.id)


def fifo_key(w: Workload) -> tuple:
    return (w.submitted_at, w.id)


def las_in_tenant_key(w: Workload, attained: Mapping[str, float] = _NONE) -> tuple:
    return (attained.get(w.id, 0.0), -w.priority, w.submitted_at, w.id)


def fair_tenant_key(
    allocated: float,
    fair_share: float,
    guaranteed: float,
    tenant: str,
    service: float | None = None,
) -> tuple:
    """Lower is served first: tenants below their guarantee before the others, by
    allocated / fair share (a zero share last); borrowers by `service` (attained service per
    unit of weight) when given, then like the others; then the tenant name."""
    ratio = allocated / fair_share if fair_share > 0 else INF
    if allocated < guaranteed:
        return (0, 0.0, ratio, allocated, tenant)
    return (1, service or 0.0, ratio, allocated, tenant)


def las_tenant_key(attained: float, allocated: float, tenant: str) -> tuple:
    return (attained, allocated, tenant)
