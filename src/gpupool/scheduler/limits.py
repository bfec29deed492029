"""Tenant limits over the whole ancestor chain, and per-user caps; and the one home of the
texts that tell about them (`at_limit_text`, `user_cap_text`, `never_within_text`), which the
cycle, the submit API and the simulator all use.

`Usage` counts GPU milli held per tenant subtree and per (capping tenant, user); admissions in
a cycle are added with `add`, preemptions taken back with `remove`.
"""

from __future__ import annotations

from typing import NamedTuple

from gpupool.domain import TenantTree


def gpus_text(milli: float) -> str:
    """'8 GPUs', '1 GPU', '2.5 GPUs'."""
    v = milli / 1000
    return f"{v:g} GPU" + ("" if v == 1 else "s")


class Usage:
    """GPU milli held per tenant (each subtree) and per user under tenants that cap users."""

    def __init__(self, tree: TenantTree):
        self.tree = tree
        self.tenant: dict[str, int] = {}
        self.user: dict[tuple[str, str], int] = {}
        self._chain: dict[str, list[str]] = {}
        self._user_caps: dict[str, list[str]] = {}
        #: tenant -> ((ancestor, its limit) for each that sets one, nearest first;
        #: (ancestor, its per-user cap) for each that sets one): what `limit_check` compares
        self._limits: dict[str, tuple[list[tuple[str, int]], list[tuple[str, int]]]] = {}
        #: tenant -> (`chain`, `capping`): what `add` walks, looked up once per call
        self._paths: dict[str, tuple[list[str], list[str]]] = {}

    def chain(self, tenant: str) -> list[str]:
        """`tenant` and its ancestors, nearest first (just `tenant` if unknown)."""
        c = self._chain.get(tenant)
        if c is None:
            c = self.tree.ancestors(tenant) if tenant in self.tree else [tenant]
            self._chain[tenant] = c
        return c

    def capping(self, tenant: str) -> list[str]:
        """Tenants in the chain that set a per-user cap."""
        c = self._user_caps.get(tenant)
        if c is None:
            c = [
                a
                for a in self.chain(tenant)
                if a in self.tree and self.tree.get(a).quota.max_milli_per_user is not None
            ]
            self._user_caps[tenant] = c
        return c

    def limits(self, tenant: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """(the tenant limits along the chain, nearest first; the per-user caps), each as
        (tenant that sets it, its value in milli)."""
        got = self._limits.get(tenant)
        if got is None:
            tree = self.tree
            lims = []
            for a in self.chain(tenant):
                lim = tree.get(a).quota.limit_milli if a in tree else None
                if lim is not None:
                    lims.append((a, lim))
            caps = []
            for a in self.capping(tenant):
                cap = tree.get(a).quota.max_milli_per_user
                assert cap is not None
                caps.append((a, cap))
            got = self._limits[tenant] = (lims, caps)
        return got

    def add(self, tenant: str, user: str, milli: int) -> None:
        """Count `milli` more held by `user` in `tenant` (every ancestor's subtree, and each
        per-user cap on the chain)."""
        path = self._paths.get(tenant)
        if path is None:
            path = self._paths[tenant] = (self.chain(tenant), self.capping(tenant))
        held = self.tenant
        for a in path[0]:
            held[a] = held.get(a, 0) + milli
        if path[1]:
            by_user = self.user
            for a in path[1]:
                k = (a, user)
                by_user[k] = by_user.get(k, 0) + milli

    def remove(self, tenant: str, user: str, milli: int) -> None:
        self.add(tenant, user, -milli)

    def of(self, tenant: str) -> int:
        return self.tenant.get(tenant, 0)


TENANT = "tenant"
USER = "user"


class LimitHit(NamedTuple):
    """A limit that blocks an admission: `scope` TENANT or USER, the tenant that sets it, why."""

    scope: str
    tenant: str
    why: str


def limit_check(usage: Usage, tenant: str, user: str, milli: int) -> LimitHit | None:
    """The limit that admitting `milli` more for (`tenant`, `user`) would break: a tenant limit
    anywhere on the ancestor chain (nearest first), or a per-user cap; None if none would."""
    if milli <= 0:
        return None
    lims, caps = usage.limits(tenant)
    used = usage.tenant
    for a, lim in lims:
        u = used.get(a, 0)
        if u + milli > lim:
            return LimitHit(TENANT, a, at_limit_text(a, lim, u))
    if caps:
        held_by = usage.user
        for a, cap in caps:
            if held_by.get((a, user), 0) + milli > cap:
                return LimitHit(USER, a, user_cap_text(user, a, cap))
    return None


class NeverWithin(NamedTuple):
    """A limit no request of this size can ever be admitted under: `scope` TENANT (the
    tenant's limit) or USER (its per-user cap), the tenant that sets it, and its value."""

    scope: str
    tenant: str
    limit_milli: int


def never_within(tree: TenantTree, tenant: str, milli: int) -> NeverWithin | None:
    """The limit that `milli` exceeds for `tenant` even with nothing running: over the whole
    ancestor chain (nearest first), each tenant's limit, then its per-user cap; or None."""
    for a in tree.ancestors(tenant):
        q = tree.get(a).quota
        if q.limit_milli is not None and milli > q.limit_milli:
            return NeverWithin(TENANT, a, q.limit_milli)
        if q.max_milli_per_user is not None and milli > q.max_milli_per_user:
            return NeverWithin(USER, a, q.max_milli_per_user)
    return None


# -- the texts -------------------------------------------------------------------------------


def at_limit_text(tenant: str, limit_milli: int, used_milli: int | None = None) -> str:
    """'lab-a is at its limit of 4 GPUs (3 GPUs in use)' (without the use if not given)."""
    used = "" if used_milli is None else f" ({gpus_text(used_milli)} in use)"
    return f"{tenant} is at its limit of {gpus_text(limit_milli)}{used}"


def user_cap_text(user: str, tenant: str, cap_milli: int) -> str:
    """'alice is at the per-user cap of 2 GPUs in lab-a'."""
    return f"{user} is at the per-user cap of {gpus_text(cap_milli)} in {tenant}"


def never_within_text(hit: NeverWithin, milli: int) -> str:
    """Why a request for `milli` can never be admitted under `hit`, and what to ask for:
    "asks for 8 GPUs but lab-a's limit is 4 GPUs; ask for at most 4 GPUs or ask an admin to
    raise it"."""
    if hit.scope == TENANT:
        return (
            f"asks for {gpus_text(milli)} but {hit.tenant}'s limit is "
            f"{gpus_text(hit.limit_milli)}; {_smaller(hit.limit_milli)}ask an admin to raise it"
        )
    return (
        f"asks for {gpus_text(milli)} but the per-user cap in {hit.tenant} is "
        f"{gpus_text(hit.limit_milli)}; {_smaller(hit.limit_milli)}ask an admin to raise it"
    )


def _smaller(limit_milli: int) -> str:
    """'ask for at most 2 GPUs or ' (nothing when the limit is 0: no request fits)."""
    return f"ask for at most {gpus_text(limit_milli)} or " if limit_milli > 0 else ""
