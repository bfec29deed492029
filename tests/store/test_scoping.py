"""Exact tenant scoping in the repositories, the login throttle's and the idempotency keys'
tables, and migration 0002: on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.exc import IntegrityError

from gpupool.domain import Request, Tenant, User, Workload
from gpupool.store import EventRepo, TenantRepo, UsageRepo, UserRepo, WorkloadRepo
from gpupool.store.db import MIGRATIONS
from gpupool.store.idempotency import IdempotencyRepo
from gpupool.store.rows import LoginThrottleRow
from gpupool.store.throttle import LoginThrottleRepo

TENANTS = ["ml_team", "ml_team/a", "ml-team", "ml-team/sub", "mlxteam", "Bio", "bio", "bio/x"]


@pytest.fixture
def scoped(store):
    with store.write() as s:
        UserRepo(s).create(User("u"), None, 0.0)
        for t in TENANTS:
            TenantRepo(s).save(Tenant(t), 0.0)
        for i, t in enumerate(TENANTS):
            wid = f"w-{i}"
            WorkloadRepo(s).add(Workload(wid, t, "u", Request(gpus=1), submitted_at=float(i)))
            UsageRepo(s).add(workload_id=wid, tenant=t, user="u", day="2026-01-01")
    return store


@pytest.mark.parametrize(
    ("roots", "seen"),
    [
        (["ml_team"], {"ml_team", "ml_team/a"}),
        (["ml-team"], {"ml-team", "ml-team/sub"}),
        (["Bio"], {"Bio"}),
        (["bio"], {"bio", "bio/x"}),
        (["ml%"], set()),
        (["ml_team/a", "Bio"], {"ml_team/a", "Bio"}),
        ([], set()),
    ],
)
def test_subtrees_are_exact_and_case_sensitive(scoped, roots, seen):
    with scoped.read() as s:
        assert {r.tenant for r in WorkloadRepo(s).rows(tenants=roots)} == seen
        assert {e.tenant for _, e in EventRepo(s).list(tenants=roots)} == seen
        assert {u.key for u in UsageRepo(s).rollup("tenant", tenants=roots)} == seen
        if len(roots) == 1:
            assert {r.tenant for r in WorkloadRepo(s).rows(tenant=roots[0])} == seen


def test_own_workloads_stay_visible_outside_the_roots(scoped):
    with scoped.read() as s:
        rows = WorkloadRepo(s).rows(tenants=["Bio"], visible_to_user="u")
    assert {r.tenant for r in rows} == set(TENANTS)


def test_migration_0002_adds_its_tables_and_goes_down_and_up(store):
    names = set(inspect(store.engine).get_table_names())
    assert {"login_throttle", "idempotency_keys"} <= names
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
        conn.commit()
    assert not {"login_throttle", "idempotency_keys"} & set(inspect(store.engine).get_table_names())
    store.migrate()
    assert {"login_throttle", "idempotency_keys"} <= set(inspect(store.engine).get_table_names())


def test_login_throttle_rows(store):
    with store.write() as s:
        repo = LoginThrottleRepo(s)
        repo.add(LoginThrottleRow(key="account:a", level=1, last_failure_at=10, blocked_until=0))
        repo.add(LoginThrottleRow(key="client:b", level=3, last_failure_at=99, blocked_until=5))
    with store.write() as s:
        repo = LoginThrottleRepo(s)
        assert set(repo.get_many(["account:a", "client:b", "x"])) == {"account:a", "client:b"}
        assert repo.locked("client:b").level == 3
        assert repo.prune(before=50) == 1
        repo.delete("client:b")
    with store.read() as s:
        assert LoginThrottleRepo(s).get_many(["account:a", "client:b"]) == {}


def test_an_idempotency_key_binds_once_per_user(scoped):
    with scoped.write() as s:
        UserRepo(s).create(User("v"), None, 0.0)
        IdempotencyRepo(s).add("u", "k1", "h" * 64, "w-0", 1.0)
        IdempotencyRepo(s).add("v", "k1", "h" * 64, "w-1", 1.0)  # another user's: unrelated
    with scoped.read() as s:
        assert IdempotencyRepo(s).get("u", "k1").workload_id == "w-0"
        assert IdempotencyRepo(s).get("v", "k1").workload_id == "w-1"
        assert IdempotencyRepo(s).get("u", "k2") is None
    with pytest.raises(IntegrityError), scoped.write() as s:
        IdempotencyRepo(s).add("u", "k1", "g" * 64, "w-2", 2.0)
