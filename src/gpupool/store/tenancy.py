"""Repositories for tenants, users, memberships and API tokens."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from gpupool.domain import Membership, Role, Tenant, TenantTree, User
from gpupool.domain.tenancy import in_subtree, validate_tenant_path
from gpupool.store.convert import (
    membership_to_domain,
    tenant_to_domain,
    tenant_to_row,
    user_to_domain,
)
from gpupool.store.db import in_chunks
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import MembershipRow, TenantRow, TokenRow, UserRow, WorkloadRow


class TenantRepo:
    def __init__(self, s: Session):
        self.s = s

    def tree(self) -> TenantTree:
        return TenantTree(tenant_to_domain(r) for r in self.s.scalars(select(TenantRow)))

    def list(self) -> list[Tenant]:
        return [tenant_to_domain(r) for r in self.s.scalars(select(TenantRow).order_by("name"))]

    def get(self, name: str) -> Tenant:
        row = self.s.get(TenantRow, name)
        if row is None:
            raise NotFound(f"no tenant {name!r}; list them with GET /api/v1/tenants")
        return tenant_to_domain(row)

    def exists(self, name: str) -> bool:
        return self.s.get(TenantRow, name) is not None

    def save(self, tenant: Tenant, now: float, *, create: bool | None = None) -> Tenant:
        """Insert or update `tenant`; missing ancestors are created with an empty quota.

        The whole tree is validated first (children's guarantees must fit the parent's
        limit), so an invalid quota is refused and nothing is written. `create=True` refuses
        an existing name, `create=False` a missing one.
        """
        validate_tenant_path(tenant.name)
        row = self.s.get(TenantRow, tenant.name)
        if create is True and row is not None:
            raise Conflict(f"tenant {tenant.name!r} already exists; change it with PATCH")
        if create is False and row is None:
            raise NotFound(f"no tenant {tenant.name!r}; create it first")
        if row is None and tenant.parent is not None:
            parent = self.s.get(TenantRow, tenant.parent)
            if parent is not None and self._holds_work(tenant.parent):
                raise Conflict(
                    f"{tenant.parent!r} has workloads, and only leaf tenants hold work; "
                    "create the sub-tenant after its workloads have finished"
                )
        self.tree().with_tenant(tenant)  # raises ValidationError if the tree would be invalid
        for ancestor in _ancestors(tenant.name):  # root first
            if self.s.get(TenantRow, ancestor) is None:
                self.s.add(
                    tenant_to_row(Tenant(ancestor), TenantRow(name=ancestor, created_at=now))
                )
                self.s.flush()
        if row is None:
            row = TenantRow(name=tenant.name, created_at=now)
            self.s.add(tenant_to_row(tenant, row))
        else:
            tenant_to_row(tenant, row)
        self.s.flush()
        return tenant

    def _holds_work(self, name: str) -> bool:
        n = self.s.scalar(select(func.count()).where(WorkloadRow.tenant == name))
        return bool(n)

    def delete(self, name: str) -> None:
        row = self.s.get(TenantRow, name)
        if row is None:
            raise NotFound(f"no tenant {name!r}")
        if self.s.scalar(select(func.count()).where(TenantRow.parent == name)):
            raise Conflict(f"tenant {name!r} has sub-tenants; delete them first")
        if self._holds_work(name):
            raise Conflict(f"tenant {name!r} has workloads on record and cannot be deleted")
        self.s.delete(row)
        self.s.flush()


def _ancestors(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


class UserRepo:
    def __init__(self, s: Session):
        self.s = s

    def _row(self, name: str) -> UserRow:
        row = self.s.get(UserRow, name)
        if row is None:
            raise NotFound(f"no user {name!r}; list them with GET /api/v1/users")
        return row

    def get(self, name: str) -> User:
        return user_to_domain(self._row(name))

    def find(self, name: str) -> User | None:
        row = self.s.get(UserRow, name)
        return None if row is None or row.disabled else user_to_domain(row)

    def find_many(self, names: Collection[str]) -> dict[str, User]:
        """`find` of each of `names` (one query per `in_chunks`): name -> user, for those
        that exist and are not disabled."""
        out: dict[str, User] = {}
        for part in in_chunks(sorted(set(names))):
            q = select(UserRow).where(UserRow.name.in_(part))
            out.update((r.name, user_to_domain(r)) for r in self.s.scalars(q) if not r.disabled)
        return out

    def names_ignoring_case(self, name: str) -> list[str]:
        """Every user name (disabled ones too) equal to `name` but for ASCII case. User names
        are ASCII, so SQL lower() agrees on SQLite and PostgreSQL."""
        q = select(UserRow.name).where(func.lower(UserRow.name) == name.lower())
        return sorted(self.s.scalars(q))

    def list(self) -> list[User]:
        return [user_to_domain(r) for r in self.s.scalars(select(UserRow).order_by("name"))]

    def create(self, user: User, password_hash: str | None, now: float) -> User:
        if self.s.get(UserRow, user.name) is not None:
            raise Conflict(f"user {user.name!r} already exists")
        self.s.add(
            UserRow(
                name=user.name,
                admin=user.admin,
                unix_user=user.unix_user,
                password_hash=password_hash,
                created_at=now,
                disabled=False,
            )
        )
        self.s.flush()
        return user

    def update(
        self,
        name: str,
        *,
        admin: bool | None = None,
        unix_user: str | None = None,
        password_hash: str | None = None,
        disabled: bool | None = None,
    ) -> User:
        row = self._row(name)
        if admin is not None:
            row.admin = admin
        if unix_user is not None:
            row.unix_user = unix_user or None
        if password_hash is not None:
            row.password_hash = password_hash
        if disabled is not None:
            row.disabled = disabled
        self.s.flush()
        return user_to_domain(row)

    def password_hash(self, name: str) -> str | None:
        row = self.s.get(UserRow, name)
        return None if row is None or row.disabled else row.password_hash

    def disabled(self, name: str) -> bool:
        return self._row(name).disabled

    def memberships(self, user: str | None = None) -> list[Membership]:
        q = select(MembershipRow).order_by(MembershipRow.user, MembershipRow.tenant)
        if user is not None:
            q = q.where(MembershipRow.user == user)
        return [membership_to_domain(r) for r in self.s.scalars(q)]

    def set_membership(self, m: Membership) -> Membership:
        self._row(m.user)
        if self.s.get(TenantRow, m.tenant) is None:
            raise NotFound(f"no tenant {m.tenant!r}; create it first")
        row = self.s.get(MembershipRow, (m.user, m.tenant))
        if row is None:
            self.s.add(MembershipRow(user=m.user, tenant=m.tenant, role=str(m.role)))
        else:
            row.role = str(m.role)
        self.s.flush()
        return m

    def remove_membership(self, user: str, tenant: str) -> None:
        res = self.s.execute(
            delete(MembershipRow).where(MembershipRow.user == user, MembershipRow.tenant == tenant)
        )
        if not res.rowcount:  # type: ignore[attr-defined]
            raise NotFound(f"user {user!r} is not a member of {tenant!r}")


@dataclass(frozen=True, slots=True)
class Token:
    """An API token as stored: its id, owner and times; only the hash of its secret."""

    id: str
    user: str
    name: str
    token_hash: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None


def _token(row: TokenRow) -> Token:
    return Token(
        row.id,
        row.user,
        row.name,
        row.token_hash,
        row.created_at,
        row.expires_at,
        row.revoked_at,
        row.last_used_at,
    )


class TokenRepo:
    """API tokens. The repository sees only hashes; secrets never reach the database."""

    def __init__(self, s: Session):
        self.s = s

    def issue(
        self,
        token_id: str,
        user: str,
        name: str,
        token_hash: str,
        now: float,
        expires_at: float | None,
    ) -> Token:
        """Record a new token of `user` (created now, never used, not revoked)."""
        row = TokenRow(
            id=token_id,
            user=user,
            name=name,
            token_hash=token_hash,
            created_at=now,
            expires_at=expires_at,
            revoked_at=None,
            last_used_at=None,
        )
        self.s.add(row)
        self.s.flush()
        return _token(row)

    def by_hash(self, token_hash: str) -> Token | None:
        row = self.s.scalar(select(TokenRow).where(TokenRow.token_hash == token_hash))
        return None if row is None else _token(row)

    def _row(self, token_id: str) -> TokenRow:
        row = self.s.get(TokenRow, token_id)
        if row is None:
            raise NotFound(f"no token {token_id!r}; list yours with GET /api/v1/tokens")
        return row

    def get(self, token_id: str) -> Token:
        return _token(self._row(token_id))

    def list(self, user: str | None = None) -> list[Token]:
        q = select(TokenRow).order_by(TokenRow.created_at)
        if user is not None:
            q = q.where(TokenRow.user == user)
        return [_token(r) for r in self.s.scalars(q)]

    def revoke(self, token_id: str, now: float) -> Token:
        row = self._row(token_id)
        if row.revoked_at is None:
            row.revoked_at = now
        self.s.flush()
        return _token(row)

    def revoke_all(self, user: str, now: float, *, keep: str | None = None) -> int:
        """Revoke every live token of `user` except `keep`; returns how many."""
        q = update(TokenRow).where(TokenRow.user == user, TokenRow.revoked_at.is_(None))
        if keep is not None:
            q = q.where(TokenRow.id != keep)
        res = self.s.execute(q.values(revoked_at=now))
        return int(res.rowcount or 0)  # type: ignore[attr-defined]

    def touch(self, token_id: str, now: float) -> None:
        row = self.s.get(TokenRow, token_id)
        if row is not None:
            row.last_used_at = now


def role_in(memberships: list[Membership], tenant: str) -> Role | None:
    """The strongest role a user holds on `tenant` through it or one of its ancestors."""
    order = [Role.TENANT_ADMIN, Role.MEMBER, Role.VIEWER]
    found = [m.role for m in memberships if in_subtree(tenant, m.tenant)]
    for r in order:
        if r in found:
            return r
    return None
