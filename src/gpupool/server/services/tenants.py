"""Tenants: the tree, quotas and idle policy, with what each subtree holds and waits for."""

from __future__ import annotations

import dataclasses

from gpupool.domain import Tenant, TenantTree, ValidationError
from gpupool.domain.external_names import TENANT_NAMES
from gpupool.domain.runtime import duration_text, runtime_policy
from gpupool.domain.tenancy import in_subtree
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import PermissionDenied
from gpupool.server.schemas.convert import quota_from_in, quota_out
from gpupool.server.schemas.tenancy import TenantCreateIn, TenantOut, TenantUpdateIn
from gpupool.store import AllocationRepo, NotFound, TenantRepo, WorkloadRepo


def _visible(p: Principal, tree: TenantTree) -> list[Tenant]:
    roots = p.readable_roots()
    if roots is None:
        return list(tree)
    keep: set[str] = set()
    for t in tree:
        if any(tree.in_subtree(t.name, r) for r in roots):
            keep.update(tree.ancestors(t.name))  # ancestors too, so the tree renders
    return [t for t in tree if t.name in keep]


def list_tenants(ctx: AppContext, p: Principal) -> list[TenantOut]:
    with ctx.store.read() as s:
        tree = TenantRepo(s).tree()
        running = AllocationRepo(s).running()
        pending = WorkloadRepo(s).pending()
    held: dict[str, int] = {}
    for r in running:
        held[r.workload.tenant] = held.get(r.workload.tenant, 0) + r.allocation.gpu_milli
    waiting: dict[str, int] = {}
    for w in pending:
        waiting[w.tenant] = waiting.get(w.tenant, 0) + w.request.total_gpu_milli
    nrun: dict[str, int] = {}
    for r in running:
        nrun[r.workload.tenant] = nrun.get(r.workload.tenant, 0) + 1
    npend: dict[str, int] = {}
    for w in pending:
        npend[w.tenant] = npend.get(w.tenant, 0) + 1

    def total(d: dict[str, int], name: str) -> int:
        return sum(v for k, v in d.items() if tree.in_subtree(k, name))

    return [
        TenantOut(
            name=t.name,
            parent=t.parent,
            children=list(tree.children(t.name)),
            leaf=tree.is_leaf(t.name),
            quota=quota_out(t.quota),
            idle_timeout_s=t.idle_timeout_s,
            default_runtime_s=t.default_runtime_s,
            max_runtime_s=t.max_runtime_s,
            allocated_gpus=total(held, t.name) / 1000,
            pending_gpus=total(waiting, t.name) / 1000,
            running=total(nrun, t.name),
            pending=total(npend, t.name),
        )
        for t in _visible(p, tree)
    ]


def may_see(p: Principal, name: str) -> bool:
    """Whether `p` may see tenant `name`, decided from names alone (nothing is read): the
    tenants of a subtree it reads and their ancestors, as `list_tenants` shows them."""
    roots = p.readable_roots()
    return roots is None or any(in_subtree(name, r) or in_subtree(r, name) for r in roots)


def require_visible(p: Principal, name: str) -> None:
    """Raise the 404 of a tenant that does not exist unless `p` may see `name`: whether a
    tenant the caller may not see exists is not told (review F10)."""
    if not may_see(p, name):
        raise NotFound(f"no tenant {name!r}; list them with GET /api/v1/tenants")


def get_tenant(ctx: AppContext, p: Principal, name: str) -> TenantOut:
    require_visible(p, name)
    with ctx.store.read() as s:
        TenantRepo(s).get(name)
    for t in list_tenants(ctx, p):
        if t.name == name:
            return t
    raise NotFound(f"no tenant {name!r}; list them with GET /api/v1/tenants")


def _require_configure(p: Principal, name: str, what: str) -> None:
    if not p.can_configure(name):
        raise PermissionDenied(
            f"only an admin, or a tenant-admin of a tenant above {name!r}, may {what}"
        )


def _external_names(name: str) -> dict[str, str]:
    return {what: name_of(name) for what, name_of in TENANT_NAMES}


def _check_external_names(tree: TenantTree, name: str) -> None:
    """Refuse a new tenant whose name in another system (`TENANT_NAMES`: a namespace, an
    account) would be an existing tenant's (security review F3, F12). The mappings are
    injective up to a 40-bit hash, so this is a backstop; the other tenant is not named (no
    existence oracle)."""
    mine = _external_names(name)
    for t in tree:
        if t.name == name:
            continue  # the same name: the store's own conflict answers it
        theirs = _external_names(t.name)
        for what, external in mine.items():
            if theirs[what] == external:
                raise ValidationError(
                    f"tenant name {name!r} would get the {what} {external!r} of an existing "
                    "tenant; choose another name",
                    "name",
                )


def _check_runtime_ceiling(p: Principal, tree: TenantTree, t: Tenant) -> None:
    """A tenant-admin may tighten the maximum runtime a subtenant inherits, not lift it: a
    subtenant's own maximum wins over its ancestors' (`domain.runtime`), so one above the
    maximum an admin set higher up would make that maximum bind nothing (PermissionDenied).
    Admins may set any."""
    if p.admin or t.max_runtime_s is None or t.parent is None:
        return
    above = runtime_policy(tree, t.parent)
    if above.max_s is not None and t.max_runtime_s > above.max_s:
        raise PermissionDenied(
            f"max_runtime {duration_text(t.max_runtime_s)} is above the maximum of "
            f"{duration_text(above.max_s)} ({above.max_from}) that {t.name} inherits; give "
            f"at most {above.max_s:g} s, or ask an admin for a longer one"
        )


def create_tenant(ctx: AppContext, p: Principal, body: TenantCreateIn) -> TenantOut:
    _require_configure(p, body.name, "create it")
    tenant = Tenant(
        body.name,
        quota_from_in(body.quota),
        body.idle_timeout_s,
        default_runtime_s=body.default_runtime_s,
        max_runtime_s=body.max_runtime_s,
    )
    with ctx.store.write() as s:
        repo = TenantRepo(s)
        tree = repo.tree()
        _check_external_names(tree, body.name)
        _check_runtime_ceiling(p, tree, tenant)
        repo.save(tenant, ctx.clock.now(), create=True)
    ctx.wake_scheduler()
    return get_tenant(ctx, p, body.name)


def update_tenant(ctx: AppContext, p: Principal, name: str, body: TenantUpdateIn) -> TenantOut:
    require_visible(p, name)
    _require_configure(p, name, "change its quota or policy")  # before reading: no oracle
    with ctx.store.write() as s:
        repo = TenantRepo(s)
        current = repo.get(name)
        changed = current
        if body.quota is not None:
            changed = dataclasses.replace(changed, quota=quota_from_in(body.quota))
        if body.clear_idle_timeout:
            changed = dataclasses.replace(changed, idle_timeout_s=None)
        elif body.idle_timeout_s is not None:
            changed = dataclasses.replace(changed, idle_timeout_s=body.idle_timeout_s)
        changed = _runtime_changed(changed, body)
        if changed.max_runtime_s != current.max_runtime_s:
            _check_runtime_ceiling(p, repo.tree(), changed)
        repo.save(changed, ctx.clock.now(), create=False)
    ctx.wake_scheduler()
    return get_tenant(ctx, p, name)


def _runtime_changed(t: Tenant, body: TenantUpdateIn) -> Tenant:
    """`t` with the runtime policy `body` sets or clears (the domain checks the default is
    not above the maximum: a 422 naming both)."""
    for field, value, clear in (
        ("default_runtime_s", body.default_runtime_s, body.clear_default_runtime),
        ("max_runtime_s", body.max_runtime_s, body.clear_max_runtime),
    ):
        if clear and value is not None:
            raise ValidationError(f"give {field} or clear it, not both", field)
        if clear:
            t = dataclasses.replace(t, **{field: None})
        elif value is not None:
            t = dataclasses.replace(t, **{field: value})
    return t


def delete_tenant(ctx: AppContext, p: Principal, name: str) -> None:
    require_visible(p, name)
    _require_configure(p, name, "delete it")  # before reading: no oracle
    with ctx.store.write() as s:
        repo = TenantRepo(s)
        repo.get(name)
        repo.delete(name)
