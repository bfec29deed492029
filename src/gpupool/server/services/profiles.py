"""Profiles: admins define them; everyone sees those offered to their tenants."""

from __future__ import annotations

from gpupool.domain import ValidationError, WorkloadKind
from gpupool.domain.profiles import Profile
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import PermissionDenied
from gpupool.server.schemas.convert import profile_out, request_from_in
from gpupool.server.schemas.workloads import ProfileOut, ProfileSpecIn
from gpupool.store import ProfileRepo, TenantRepo


def _offered(p: Principal, prof: Profile) -> bool:
    roots = p.readable_roots()
    return roots is None or any(
        prof.allows(t) or any(x.startswith(t + "/") for x in prof.tenants) for t in roots
    )


def list_profiles(ctx: AppContext, p: Principal) -> list[ProfileOut]:
    with ctx.store.read() as s:
        return [profile_out(x) for x in ProfileRepo(s).list() if _offered(p, x)]


def get_profile(ctx: AppContext, p: Principal, name: str) -> ProfileOut:
    with ctx.store.read() as s:
        prof = ProfileRepo(s).get(name)
    if not _offered(p, prof):
        raise PermissionDenied(f"profile {name!r} is not offered to your tenants")
    return profile_out(prof)


def save_profile(
    ctx: AppContext, p: Principal, name: str, body: ProfileSpecIn, *, create: bool
) -> ProfileOut:
    p.require_admin("define profiles")
    if body.nodes > 1:
        raise ValidationError(
            "a profile is one node's resources; submit multi-node jobs with nodes and "
            "gpus_per_node instead",
            "nodes",
        )
    prof = Profile(
        name=name,
        request=request_from_in(body),
        description=body.description,
        kind=WorkloadKind(body.kind),
        image=body.image,
        tenants=tuple(body.tenants),
        default_runtime_s=body.default_runtime_s,
        max_runtime_s=body.max_runtime_s,
    )
    with ctx.store.write() as s:
        tree = TenantRepo(s).tree()
        for t in prof.tenants:
            tree.get(t)  # unknown tenant -> ValidationError naming the known ones
        ProfileRepo(s).save(prof, create=create)
    return profile_out(prof)


def delete_profile(ctx: AppContext, p: Principal, name: str) -> None:
    p.require_admin("delete profiles")
    with ctx.store.write() as s:
        ProfileRepo(s).delete(name)
