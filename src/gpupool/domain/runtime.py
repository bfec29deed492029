"""Runtime policy: the max runtime a workload gets when it declares none, and the most it may
declare, set per tenant (inherited from the nearest ancestor that sets it) and per profile
(a profile's value wins over its tenant's, for the work started from it: notebooks).

Rules (docs/admin-guide.md, "Runtime policy"):

* a declared max runtime above the maximum is refused, naming the maximum;
* work that declares none gets the default; with no default but a maximum, the maximum
  (so no work outlives the maximum);
* the culler warns `warn_before_s` before the end and stops the work at its max runtime
  (`server/loops/culler.py`); nothing else here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import ValidationError
from gpupool.domain.profiles import Profile
from gpupool.domain.tenancy import TenantTree


def duration_text(seconds: float) -> str:
    """'48 h', '90 min', '1.5 h', '45 s': how runtime limits are written in messages."""
    if seconds >= 3600:
        return f"{seconds / 3600:.4g} h"
    if seconds >= 60:
        return f"{seconds / 60:.4g} min"
    return f"{seconds:.4g} s"


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    """The runtime policy that applies to one submission; `*_from` say who set each value
    ("tenant physics", "profile gpu-1"), for messages."""

    default_s: float | None = None
    max_s: float | None = None
    default_from: str = ""
    max_from: str = ""

    def apply(self, declared_s: float | None) -> float | None:
        """The max runtime the workload gets: `declared_s` if within the maximum (else
        ValidationError naming the maximum), the default when it declares none, else the
        maximum (None: no limit)."""
        if declared_s is None:
            return self.default_s if self.default_s is not None else self.max_s
        if self.max_s is not None and declared_s > self.max_s:
            raise ValidationError(
                f"max_runtime {duration_text(declared_s)} is above the maximum of "
                f"{duration_text(self.max_s)} ({self.max_from}); ask for at most "
                f"{self.max_s:g} s, or ask an admin to raise the maximum",
                "max_runtime_s",
            )
        return declared_s


def runtime_policy(tree: TenantTree, tenant: str, profile: Profile | None = None) -> RuntimePolicy:
    """The policy for work of `tenant` (a leaf in `tree`), started from `profile` if any:
    each value from the profile when it sets it, else from the nearest tenant up the tree
    that does."""
    default_s = max_s = None
    default_from = max_from = ""
    if profile is not None:
        if profile.default_runtime_s is not None:
            default_s, default_from = profile.default_runtime_s, f"profile {profile.name}"
        if profile.max_runtime_s is not None:
            max_s, max_from = profile.max_runtime_s, f"profile {profile.name}"
    if tenant in tree:
        for name in tree.ancestors(tenant):
            t = tree.get(name)
            if default_s is None and t.default_runtime_s is not None:
                default_s, default_from = t.default_runtime_s, f"tenant {name}"
            if max_s is None and t.max_runtime_s is not None:
                max_s, max_from = t.max_runtime_s, f"tenant {name}"
    if default_s is not None and max_s is not None and default_s > max_s:
        default_s, default_from = max_s, max_from  # an ancestor's default above a lower max
    return RuntimePolicy(default_s, max_s, default_from, max_from)
