"""Profiles: named, admin-defined workload shapes users pick from ("1 x H100", "1/4 GPU, 20 GB")."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import ValidationError
from gpupool.domain.tenancy import check_runtime_policy
from gpupool.domain.workloads import Request, WorkloadKind


@dataclass(frozen=True, slots=True)
class Profile:
    """A named request. `tenants` lists the tenants (and their subtrees) that may use it;
    empty means every tenant. `image` is used by container executors (Kubernetes)."""

    name: str
    request: Request = Request()
    description: str = ""
    kind: WorkloadKind = WorkloadKind.NOTEBOOK
    image: str | None = None
    tenants: tuple[str, ...] = ()
    #: runtime policy of the work started from it (notebooks): the max runtime given when
    #: none is declared, and the most one may declare; None: the tenant's (domain.runtime)
    default_runtime_s: float | None = None
    max_runtime_s: float | None = None

    def __post_init__(self) -> None:
        check_runtime_policy(self.default_runtime_s, self.max_runtime_s)
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValidationError(
                f"profile name {self.name!r} may only use letters, digits, '-', '_' and '.'",
                "name",
            )

    def allows(self, tenant: str) -> bool:
        """True if `tenant` (or one of its ancestors) is listed, or nothing is listed."""
        return not self.tenants or any(
            tenant == t or tenant.startswith(t + "/") for t in self.tenants
        )
