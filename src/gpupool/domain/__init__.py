"""Pure domain types and rules: resources, tenancy, workloads. No I/O; imports nothing above."""

from gpupool.domain.errors import DomainError, IllegalTransition, ValidationError
from gpupool.domain.events import Event
from gpupool.domain.resources import (
    GPU,
    MILLI_PER_GPU,
    Enforcement,
    GPUHealth,
    Node,
    NodeState,
    OutsideUse,
    Share,
    SharingMode,
)
from gpupool.domain.tenancy import Membership, Quota, Role, Tenant, TenantTree, User
from gpupool.domain.workloads import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Allocation,
    Request,
    Workload,
    WorkloadKind,
    WorkloadState,
    transition,
)

__all__ = [
    "ACTIVE_STATES",
    "GPU",
    "MILLI_PER_GPU",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Allocation",
    "DomainError",
    "Enforcement",
    "Event",
    "GPUHealth",
    "IllegalTransition",
    "Membership",
    "Node",
    "NodeState",
    "OutsideUse",
    "Quota",
    "Request",
    "Role",
    "Share",
    "SharingMode",
    "Tenant",
    "TenantTree",
    "User",
    "ValidationError",
    "Workload",
    "WorkloadKind",
    "WorkloadState",
    "transition",
]
