"""First-run setup used by `gpupool up`: the first admin, a default tenant, the local node."""

from __future__ import annotations

import secrets

from gpupool.domain import Membership, Node, Request, Role, Tenant, User
from gpupool.domain.profiles import Profile
from gpupool.domain.tenancy import check_tenant_name, check_user_name
from gpupool.server.security import hash_password
from gpupool.store import NodeRepo, Store, TenantRepo, UserRepo
from gpupool.store.profiles import ProfileRepo


def ensure_admin(store: Store, name: str, password: str | None, now: float) -> str | None:
    """Create admin `name` if no admin exists yet. Returns the password it was given (the
    generated one when `password` is None), or None when an admin already existed."""
    with store.write() as s:
        users = UserRepo(s)
        if any(u.admin for u in users.list()):
            return None
        pw = password or secrets.token_urlsafe(12)
        users.create(User(check_user_name(name), admin=True), hash_password(pw), now)
        return pw


def ensure_tenant(store: Store, name: str, now: float, members: tuple[str, ...] = ()) -> None:
    """Create tenant `name` (no quota limits) if missing, and make `members` its members."""
    with store.write() as s:
        tenants = TenantRepo(s)
        if not tenants.exists(name):
            tenants.save(Tenant(check_tenant_name(name)), now, create=True)
        users = UserRepo(s)
        for m in members:
            users.set_membership(Membership(m, name, Role.MEMBER))


def register_node(store: Store, node: Node) -> Node:
    """Register or refresh `node` (keeps the admin's sharing modes of known GPUs)."""
    with store.write() as s:
        return NodeRepo(s).upsert(node)


def default_profiles(node: Node) -> list[Profile]:
    """The profiles a fresh install offers: one whole GPU of the node's model, and CPU only.
    (Fractional profiles need a GPU in `shared` mode; admins add them with `gpupool profile`.)"""
    models = sorted({g.model for g in node.gpus})
    out = (
        [
            Profile(
                "gpu",
                Request(gpus=1, gpu_model=models[0] if len(models) == 1 else None),
                description=f"1 whole {models[0] if len(models) == 1 else ''} GPU".replace(
                    "  ", " "
                ),
            )
        ]
        if node.gpus
        else []
    )
    out.append(Profile("cpu", Request(), description="CPU only (no GPU)"))
    return out


def ensure_default_profiles(store: Store, node: Node) -> list[str]:
    """On a first run (no profile defined yet) create `default_profiles(node)`; returns the
    names created (none when the admin already has profiles: theirs are never touched)."""
    with store.write() as s:
        repo = ProfileRepo(s)
        if repo.list():
            return []
        made = default_profiles(node)
        for prof in made:
            repo.save(prof, create=True)
        return [p.name for p in made]
