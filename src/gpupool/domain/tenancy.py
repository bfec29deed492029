"""Tenants (a tree such as `physics/lab-a`), quotas, users and roles.

Quotas count GPUs in milli (1000 = one GPU). Only leaf tenants hold work; an inner tenant's
guarantee and limit bound its whole subtree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gpupool.domain.errors import ValidationError

SEPARATOR = "/"


class Role(StrEnum):
    """What a user may do. `admin` is global; the others are per tenant (and its subtree)."""

    ADMIN = "admin"
    TENANT_ADMIN = "tenant-admin"
    MEMBER = "member"
    VIEWER = "viewer"


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's GPU quota.

    guaranteed_milli: deserved GPUs, never taken away while used.
    limit_milli: hard cap including borrowing; None means no cap.
    weight: share of idle capacity relative to siblings.
    max_milli_per_user: optional cap per user inside the tenant.
    guaranteed_by_model: optional per-GPU-model guarantees (model -> milli), each part of
        (not on top of) guaranteed_milli.
    """

    guaranteed_milli: int = 0
    limit_milli: int | None = None
    weight: float = 1.0
    max_milli_per_user: int | None = None
    guaranteed_by_model: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.guaranteed_milli < 0:
            raise ValidationError("guaranteed must be >= 0", "guaranteed")
        if self.limit_milli is not None and self.limit_milli < self.guaranteed_milli:
            raise ValidationError(
                f"limit ({self.limit_milli / 1000:g} GPUs) is below guaranteed "
                f"({self.guaranteed_milli / 1000:g} GPUs); raise the limit or lower the guarantee",
                "limit",
            )
        if not self.weight > 0:
            raise ValidationError(f"weight must be > 0, got {self.weight}", "weight")
        if self.max_milli_per_user is not None and self.max_milli_per_user <= 0:
            raise ValidationError("max per user must be > 0", "max_gpus_per_user")
        if not isinstance(self.guaranteed_by_model, MappingProxyType):
            object.__setattr__(
                self, "guaranteed_by_model", MappingProxyType(dict(self.guaranteed_by_model))
            )
        if sum(self.guaranteed_by_model.values()) > self.guaranteed_milli:
            raise ValidationError(
                "per-model guarantees add up to more than the tenant's guarantee",
                "guaranteed_by_model",
            )

    @staticmethod
    def gpus(
        guaranteed: float = 0,
        limit: float | None = None,
        weight: float = 1.0,
        max_per_user: float | None = None,
        by_model: dict[str, float] | None = None,
    ) -> Quota:
        """Build a quota from GPU counts (floats allowed) instead of milli."""
        return Quota(
            guaranteed_milli=to_milli(guaranteed),
            limit_milli=None if limit is None else to_milli(limit),
            weight=weight,
            max_milli_per_user=None if max_per_user is None else to_milli(max_per_user),
            guaranteed_by_model=MappingProxyType(
                {m: to_milli(v) for m, v in (by_model or {}).items()}
            ),
        )


def to_milli(gpus: float) -> int:
    """GPUs (possibly fractional) to milli, rounded to the nearest milli."""
    return int(round(gpus * 1000))


#: One segment of a tenant name: starts with a letter, digit or '_' (never '.' or '-').
_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
#: New tenant names (published in the API schema); '..' is refused besides.
TENANT_NAME_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
TENANT_NAME_RULE = (
    "a tenant name is one or more segments joined by '/' (e.g. 'physics/lab-a'); each segment "
    "uses letters, digits, '_', '.' and '-', starts with a letter, digit or '_', and has no "
    f"'..' (pattern {TENANT_NAME_PATTERN})"
)
#: New user names (published in the API schema); '..' is refused besides.
USER_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$"
USER_NAME_RULE = (
    "a user name uses letters, digits, '_', '.', '@' and '-', starts with a letter, digit or "
    f"'_', and has no '..' (pattern {USER_NAME_PATTERN})"
)


def check_tenant_name(name: str) -> str:
    """Return `name` if it is allowed for a new tenant; else raise ValidationError saying
    the rule. Stricter than `validate_tenant_path` (which stored names must pass): no '.',
    '..' or empty segments, no leading '-'."""
    if not re.fullmatch(TENANT_NAME_PATTERN, name, re.ASCII) or ".." in name:
        raise ValidationError(f"tenant name {name!r} is not allowed: {TENANT_NAME_RULE}", "name")
    return name


def check_user_name(name: str) -> str:
    """Return `name` if it is allowed for a new user; else raise ValidationError saying the
    rule (no '.', '..', leading '-' or '.': the name may become a Unix account or a path)."""
    if not re.fullmatch(USER_NAME_PATTERN, name, re.ASCII) or ".." in name:
        raise ValidationError(f"user name {name!r} is not allowed: {USER_NAME_RULE}", "name")
    return name


def in_subtree(name: str, root: str) -> bool:
    """`name` is `root` or a tenant below it: exact and case-sensitive (`ml_team` does not
    cover `ml-team/sub`, `Bio` not `bio/x`). Its SQL twin is `store.scoping.in_subtree`."""
    return name == root or name.startswith(root + SEPARATOR)


def validate_tenant_path(path: str) -> str:
    parts = path.split(SEPARATOR)
    if not path or any(not p for p in parts):
        raise ValidationError(
            f"tenant name {path!r} is not a valid path; use names like 'lab-a' or 'physics/lab-a'",
            "tenant",
        )
    for p in parts:
        if not all(c.isalnum() or c in "-_." for c in p):
            raise ValidationError(
                f"tenant name {path!r} may only use letters, digits, '-', '_' and '.'", "tenant"
            )
    return path


def check_runtime_policy(default_s: float | None, max_s: float | None) -> None:
    """Raise ValidationError unless both are None or > 0 and the default is at most the
    maximum."""
    for value, what in ((default_s, "default_runtime"), (max_s, "max_runtime")):
        if value is not None and not value > 0:
            raise ValidationError(f"{what} must be > 0 seconds, got {value:g}", what)
    if default_s is not None and max_s is not None and default_s > max_s:
        raise ValidationError(
            f"the default runtime ({default_s:g} s) is above the maximum ({max_s:g} s); "
            "lower the default or raise the maximum",
            "default_runtime",
        )


@dataclass(frozen=True, slots=True)
class Tenant:
    """A team or project. `name` is its full path, e.g. `physics/lab-a`."""

    name: str
    quota: Quota = field(default_factory=Quota)
    idle_timeout_s: float | None = None  # culling policy for idle GPU holders; None = never
    #: runtime policy (`gpupool.domain.runtime`): the max runtime given to work that declares
    #: none, and the most a workload may declare; None = none (inherited, nearest first)
    default_runtime_s: float | None = None
    max_runtime_s: float | None = None

    def __post_init__(self) -> None:
        validate_tenant_path(self.name)
        check_runtime_policy(self.default_runtime_s, self.max_runtime_s)

    @property
    def parent(self) -> str | None:
        head, sep, _ = self.name.rpartition(SEPARATOR)
        return head if sep else None

    @property
    def depth(self) -> int:
        return self.name.count(SEPARATOR)


class TenantTree:
    """An immutable tree of tenants. Missing ancestors of a path are created with an empty quota."""

    __slots__ = ("_tenants", "_children")

    def __init__(self, tenants: Iterable[Tenant] = ()):
        by_name: dict[str, Tenant] = {}
        for t in tenants:
            if t.name in by_name:
                raise ValidationError(f"tenant {t.name!r} is defined twice", "tenant")
            by_name[t.name] = t
        for name in list(by_name):
            parent = by_name[name].parent
            while parent is not None and parent not in by_name:
                by_name[parent] = Tenant(parent)
                parent = by_name[parent].parent
        children: dict[str | None, list[str]] = {}
        for name in sorted(by_name):
            children.setdefault(by_name[name].parent, []).append(name)
        self._tenants = by_name
        self._children = {k: tuple(v) for k, v in children.items()}
        for name in by_name:
            self._check_children_fit(name)

    def _check_children_fit(self, name: str) -> None:
        t = self._tenants[name]
        kids = self.children(name)
        if not kids or t.quota.limit_milli is None:
            return
        total = sum(self._tenants[k].quota.guaranteed_milli for k in kids)
        if total > t.quota.limit_milli:
            raise ValidationError(
                f"the guarantees of {name}'s children add up to {total / 1000:g} GPUs, "
                f"more than {name}'s limit of {t.quota.limit_milli / 1000:g}",
                "guaranteed",
            )

    def __contains__(self, name: object) -> bool:
        return name in self._tenants

    def __iter__(self) -> Iterator[Tenant]:
        return iter(self._tenants[n] for n in sorted(self._tenants))

    def __len__(self) -> int:
        return len(self._tenants)

    def get(self, name: str) -> Tenant:
        try:
            return self._tenants[name]
        except KeyError:
            raise ValidationError(
                f"unknown tenant {name!r}; known tenants: {', '.join(sorted(self._tenants))}",
                "tenant",
            ) from None

    def children(self, name: str | None) -> tuple[str, ...]:
        """Direct children of `name`; `None` gives the roots."""
        return self._children.get(name, ())

    def is_leaf(self, name: str) -> bool:
        return not self.children(name)

    def leaves(self) -> list[str]:
        return [n for n in sorted(self._tenants) if self.is_leaf(n)]

    def ancestors(self, name: str) -> list[str]:
        """`name` and its ancestors, nearest first."""
        out = []
        cur: str | None = name
        while cur is not None:
            out.append(cur)
            cur = self._tenants[cur].parent
        return out

    def in_subtree(self, name: str, root: str) -> bool:
        return in_subtree(name, root)

    def with_tenant(self, tenant: Tenant) -> TenantTree:
        """A new tree with `tenant` added or replaced."""
        others = [t for t in self._tenants.values() if t.name != tenant.name]
        return TenantTree([*others, tenant])


@dataclass(frozen=True, slots=True)
class User:
    """A person. `admin` users may do everything; others act through memberships."""

    name: str
    admin: bool = False
    unix_user: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_.@" for c in self.name):
            raise ValidationError(
                f"user name {self.name!r} may only use letters, digits, '-', '_', '.', '@'",
                "name",
            )


@dataclass(frozen=True, slots=True)
class Membership:
    """`user` belongs to `tenant` (and may act on its subtree) with `role`."""

    user: str
    tenant: str
    role: Role = Role.MEMBER

    def __post_init__(self) -> None:
        if self.role is Role.ADMIN:
            raise ValidationError(
                "'admin' is a global role, not a tenant role; use tenant-admin, member or viewer",
                "role",
            )
