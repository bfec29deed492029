"""Tenant scoping is exact on every list route (issue 13, item 2): a role on `ml_team` does not
cover `ml-team/sub` (`_` was a LIKE wildcard), a role on `Bio` does not cover `bio/x` (SQLite's
LIKE ignores case). Through the API, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from gpupool.domain import Membership, Request, Role, Tenant, User, Workload
from gpupool.server.services.accounts import issue_token
from gpupool.store import TenantRepo, UsageRepo, UserRepo, WorkloadRepo
from tests.server.conftest import password_hash

#: reader -> (the tenant it may read, a look-alike tenant it must not see)
READERS = {"mlv": ("ml_team", "ml-team/sub"), "biov": ("Bio", "bio/x")}
DAY = "2026-05-28"


@pytest.fixture
def scoped(world):
    """Tenants ml_team, ml-team/sub, Bio, bio/x, one pending workload with usage in each, and a
    viewer of ml_team (mlv) and of Bio (biov)."""
    now = world.clock.now()
    ids: dict[str, str] = {}
    with world.ctx.store.write() as s:
        tenants, users, repo = TenantRepo(s), UserRepo(s), WorkloadRepo(s)
        for i, t in enumerate(["ml_team", "ml-team/sub", "Bio", "bio/x"]):
            tenants.save(Tenant(t), now)
            wid = f"w-scope{i}"
            w = Workload(wid, t, "root", Request(gpus=1), submitted_at=now + i, command=("run", t))
            repo.add(w, name=f"job-in-{t}")
            UsageRepo(s).add(
                workload_id=wid, tenant=t, user="root", day=DAY, gpu_seconds_allocated=3600
            )
            ids[t] = wid
        for name, (tenant, _) in READERS.items():
            users.create(User(name), password_hash(), now)
            users.set_membership(Membership(name, tenant, Role.VIEWER))
    for name in READERS:
        world.tokens[name] = issue_token(world.ctx, name, "test", None).token
    return ids


def _tenants_seen(world, who: str, path: str, **params) -> set[str]:
    r = world.get(who, path, params=params)
    assert r.status_code == 200, r.text
    return {(x["workload"] if path == "/queue" else x)["tenant"] for x in r.json()}


@pytest.mark.parametrize("who", sorted(READERS))
def test_workloads_queue_and_events_are_scoped_exactly(world, scoped, who):
    mine, other = READERS[who]
    assert _tenants_seen(world, who, "/workloads") == {mine}
    assert _tenants_seen(world, who, "/queue") == {mine}
    assert _tenants_seen(world, who, "/events") == {mine}
    # the tenant filter is exact too (an admin's filter was a LIKE pattern as well)
    assert _tenants_seen(world, who, "/workloads", tenant=mine) == {mine}
    assert _tenants_seen(world, "admin", "/workloads", tenant=mine) == {mine}
    assert _tenants_seen(world, "admin", "/queue", tenant=mine) == {mine}
    assert _tenants_seen(world, "admin", "/events", tenant=mine) == {mine}
    r = world.get(who, f"/workloads/{scoped[other]}")
    assert r.status_code == 404  # hidden as if it did not exist (review F10)


@pytest.mark.parametrize("who", sorted(READERS))
def test_usage_is_scoped_exactly(world, scoped, who):
    mine, other = READERS[who]
    r = world.get(who, "/usage", params={"group_by": "tenant"})
    assert r.status_code == 200, r.text
    assert {row["key"] for row in r.json()["rows"]} == {mine}
    r = world.get("admin", "/usage", params={"group_by": "tenant", "tenant": mine})
    assert {row["key"] for row in r.json()["rows"]} == {mine}


@pytest.mark.parametrize("who", sorted(READERS))
def test_dashboard_tenants_are_scoped_exactly(world, scoped, who):
    mine, other = READERS[who]
    r = world.get(who, "/dashboard/tenants")
    assert r.status_code == 200, r.text
    seen = set(r.json()["tenants"])
    assert mine in seen and other not in seen and "ml-team" not in seen


def test_event_kind_filter_is_a_literal_prefix(world, scoped):
    # `_` was a wildcard: workload_ matched workload.submitted
    assert world.get("admin", "/events", params={"kind": "workload_"}).json() == []
    assert world.get("admin", "/events", params={"kind": "WORKLOAD."}).json() == []
    assert world.get("admin", "/events", params={"kind": "workload."}).json()
