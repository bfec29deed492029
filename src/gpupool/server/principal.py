"""Who is asking: the authenticated `Principal` with its role rules, and the `TokenCache` of
recently checked tokens that every process of the server keeps (`AppContext.auth_cache`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from gpupool.domain import Membership, Role, User
from gpupool.server.problems import PermissionDenied
from gpupool.store import role_in

#: A checked token is trusted this long without asking the database again. Revocation and
#: role changes made through this server take effect at once (the cache is cleared); made
#: through another replica, within this many seconds.
CACHE_TTL_S = 5.0


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller and what it may do."""

    user: User
    memberships: tuple[Membership, ...]
    token_id: str | None = None

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def admin(self) -> bool:
        return self.user.admin

    def role_on(self, tenant: str) -> Role | None:
        if self.admin:
            return Role.ADMIN
        return role_in(list(self.memberships), tenant)

    def can_read(self, tenant: str) -> bool:
        return self.role_on(tenant) is not None

    def can_submit(self, tenant: str) -> bool:
        return self.role_on(tenant) in (Role.ADMIN, Role.TENANT_ADMIN, Role.MEMBER)

    def can_manage(self, tenant: str) -> bool:
        """Manage the tenant's workloads and members."""
        return self.role_on(tenant) in (Role.ADMIN, Role.TENANT_ADMIN)

    def can_configure(self, tenant: str) -> bool:
        """Create/edit/delete `tenant` itself: admins, and tenant-admins of an ancestor."""
        if self.admin:
            return True
        return any(
            m.role is Role.TENANT_ADMIN and tenant.startswith(m.tenant + "/")
            for m in self.memberships
        )

    def readable_roots(self) -> list[str] | None:
        """Tenant subtrees this caller may read; None means all."""
        return None if self.admin else sorted({m.tenant for m in self.memberships})

    def managed_roots(self) -> list[str] | None:
        if self.admin:
            return None
        return sorted({m.tenant for m in self.memberships if m.role is Role.TENANT_ADMIN})

    def require_admin(self, what: str) -> None:
        if not self.admin:
            raise PermissionDenied(f"only an admin may {what}")

    def require_read(self, tenant: str) -> None:
        if not self.can_read(tenant):
            raise PermissionDenied(f"you have no role in tenant {tenant!r}; ask its tenant-admin")

    def require_manage(self, tenant: str, what: str) -> None:
        if not self.can_manage(tenant):
            raise PermissionDenied(f"only a tenant-admin of {tenant!r} or an admin may {what}")


class TokenCache:
    """Recently checked tokens: sha256 -> (checked at, principal, expires at). Thread-safe."""

    def __init__(self, ttl_s: float = CACHE_TTL_S, max_entries: int = 10_000):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal, float | None]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> Principal | None:
        with self._lock:
            hit = self._entries.get(digest)
        if hit is None:
            return None
        checked, principal, expires = hit
        if now - checked > self.ttl_s or now < checked or (expires is not None and now >= expires):
            return None
        return principal

    def put(self, digest: str, now: float, principal: Principal, expires: float | None) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (now, principal, expires)

    def clear(self) -> None:
        """Forget everything (after a revocation or a change of users or roles)."""
        with self._lock:
            self._entries.clear()
