"""Persistence: SQLAlchemy rows, repositories, Alembic migrations, row <-> domain converters.

Open with `open_store(url)`; work inside `store.read()` / `store.write()` sessions through the
repositories (`TenantRepo(session)`, `WorkloadRepo(session)`, ...).
"""

from gpupool.store.admissions import AdmissionRepo, Admitted
from gpupool.store.allocations import AllocationRepo
from gpupool.store.attained import (
    attained_milli_s,
    attempt_milli_s,
    gpu_hours,
    kept_service,
    recent_runs,
)
from gpupool.store.budgets import BudgetRepo
from gpupool.store.chargeback import ChargebackRepo, ChargeRow
from gpupool.store.cluster import NodeRepo
from gpupool.store.db import Store, StoreError, open_store
from gpupool.store.energy import EnergyRepo
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.events import EventRepo
from gpupool.store.history import GpuPeriod, HistoryRepo, Retention
from gpupool.store.launches import Launch, Launched, LaunchRepo
from gpupool.store.nodeagents import NodeReportRepo, NodeTokenRepo
from gpupool.store.nodepools import NodePoolRepo
from gpupool.store.profiles import ProfileRepo
from gpupool.store.reservations import ReservationRepo, new_reservation_id
from gpupool.store.rows import ROW_KEYS
from gpupool.store.tenancy import TenantRepo, Token, TokenRepo, UserRepo, role_in
from gpupool.store.usage import UsageRepo, UsageTotal
from gpupool.store.workloads import (
    WorkloadRecord,
    WorkloadRepo,
    new_workload_id,
    record_of,
)

__all__ = [
    "ROW_KEYS",
    "AdmissionRepo",
    "Admitted",
    "AllocationRepo",
    "BudgetRepo",
    "ChargeRow",
    "ChargebackRepo",
    "Conflict",
    "EnergyRepo",
    "EventRepo",
    "GpuPeriod",
    "HistoryRepo",
    "Launch",
    "LaunchRepo",
    "Launched",
    "NodePoolRepo",
    "NodeRepo",
    "NodeReportRepo",
    "NodeTokenRepo",
    "NotFound",
    "ProfileRepo",
    "ReservationRepo",
    "Retention",
    "Store",
    "StoreError",
    "TenantRepo",
    "Token",
    "TokenRepo",
    "UsageRepo",
    "UsageTotal",
    "UserRepo",
    "WorkloadRecord",
    "WorkloadRepo",
    "attained_milli_s",
    "attempt_milli_s",
    "gpu_hours",
    "kept_service",
    "recent_runs",
    "new_reservation_id",
    "new_workload_id",
    "open_store",
    "record_of",
    "role_in",
]
