"""Repository for profiles (named workload shapes)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.profiles import Profile
from gpupool.store.convert import profile_to_domain, profile_to_row
from gpupool.store.errors import Conflict, NotFound
from gpupool.store.rows import ProfileRow


class ProfileRepo:
    def __init__(self, s: Session):
        self.s = s

    def list(self) -> list[Profile]:
        return [profile_to_domain(r) for r in self.s.scalars(select(ProfileRow).order_by("name"))]

    def get(self, name: str) -> Profile:
        row = self.s.get(ProfileRow, name)
        if row is None:
            raise NotFound(f"no profile {name!r}; list them with GET /api/v1/profiles")
        return profile_to_domain(row)

    def save(self, profile: Profile, *, create: bool) -> Profile:
        row = self.s.get(ProfileRow, profile.name)
        if create and row is not None:
            raise Conflict(f"profile {profile.name!r} already exists; change it with PATCH")
        if not create and row is None:
            raise NotFound(f"no profile {profile.name!r}")
        if row is None:
            self.s.add(profile_to_row(profile))
        else:
            profile_to_row(profile, row)
        self.s.flush()
        return profile

    def delete(self, name: str) -> None:
        row = self.s.get(ProfileRow, name)
        if row is None:
            raise NotFound(f"no profile {name!r}")
        self.s.delete(row)
        self.s.flush()
