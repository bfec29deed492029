"""A real app over a real database (SQLite and PostgreSQL), a ManualClock and the fake
executor; users for every role; helpers to call the API as each of them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from argon2 import PasswordHasher
from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.domain import GPU, Membership, Node, Quota, Role, SharingMode, Tenant, User
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.context import AppContext
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo, TenantRepo, UserRepo
from gpupool.system import System, SystemSettings, build_system
from tests.store.databases import DB_PARAMS, make_store

API = "/api/v1"
PASSWORD = "correct horse battery"
#: the world's /metrics scrape token (GPUPOOL_METRICS_TOKEN); the test client is not on
#: the server's host, so it needs it (gpupool.server.metrics_access)
METRICS_TOKEN = "scrape-test-token"
#: role name -> user name. "outsider" is a member of another tenant only.
USERS = {
    "admin": "root",
    "tenant-admin": "tina",
    "member": "ann",
    "viewer": "vic",
    "outsider": "otto",
}


@dataclass
class World:
    app: object
    client: TestClient
    ctx: AppContext
    clock: ManualClock
    executor: FakeExecutor
    tokens: dict[str, str] = field(default_factory=dict)

    def h(self, role: str) -> dict[str, str]:
        """Authorization headers for the user of `role`."""
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def scrape(self) -> str:
        """/metrics as Prometheus reads it, with the scrape token."""
        r = self.client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert r.status_code == 200, r.text
        return r.text

    def get(self, role: str, path: str, **kw):
        return self.client.get(API + path, headers=self.h(role), **kw)

    def post(self, role: str, path: str, **kw):
        return self.client.post(API + path, headers=self.h(role), **kw)

    def patch(self, role: str, path: str, **kw):
        return self.client.patch(API + path, headers=self.h(role), **kw)

    def put(self, role: str, path: str, **kw):
        return self.client.put(API + path, headers=self.h(role), **kw)

    def delete(self, role: str, path: str, **kw):
        return self.client.delete(API + path, headers=self.h(role), **kw)

    @property
    def scheduler(self) -> SchedulerLoop:
        loop = self.ctx.loops.get("scheduler")
        assert isinstance(loop, SchedulerLoop)
        return loop

    def submit(self, role: str = "member", **body) -> dict:
        body.setdefault("command", ["python", "train.py"])
        r = self.post(role, "/workloads", json=body)
        assert r.status_code == 201, r.text
        self.clock.advance(1)  # distinct submit times: a deterministic queue order
        return r.json()


_HASH: list[str] = []


def password_hash() -> str:
    """argon2 is slow on purpose: the shared test password is hashed once, with the least
    cost argon2 allows (a check reads the cost from the hash, so checks are fast too)."""
    if not _HASH:
        cheap = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
        _HASH.append(cheap.hash(PASSWORD))
    return _HASH[0]


def seed(ctx: AppContext) -> None:
    now = ctx.clock.now()
    with ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node(
                "n1",
                tuple(GPU(i, f"GPU-n1-{i}", "H100", 81920) for i in range(4)),
                cpu_milli=64000,
                memory_mib=512000,
            )
        )
        NodeRepo(s).set_sharing("GPU-n1-3", SharingMode.SHARED)
        tenants = TenantRepo(s)
        tenants.save(Tenant("lab", Quota.gpus(2, 3)), now)
        tenants.save(Tenant("other", Quota.gpus(1, 4)), now)
        users = UserRepo(s)
        for role, name in USERS.items():
            users.create(User(name, admin=role == "admin"), password_hash(), now)
        users.set_membership(Membership("tina", "lab", Role.TENANT_ADMIN))
        users.set_membership(Membership("ann", "lab", Role.MEMBER))
        users.set_membership(Membership("vic", "lab", Role.VIEWER))
        users.set_membership(Membership("otto", "other", Role.MEMBER))


@pytest.fixture(params=DB_PARAMS)
def world(request, tmp_path):
    gen = make_store(request.param, tmp_path)
    store = next(gen)
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    settings = Settings(
        database_url=store.url,
        start_loops=False,
        max_body_bytes=64 * 1024,
        metrics_token=METRICS_TOKEN,
    )
    system = build_system(
        SystemSettings(server=settings), FakeEngine(executor), clock=clock, store=store
    )
    ctx: AppContext = system.app.state.ctx
    ctx.login_throttle.refusal_delay_s = 0.0  # real time; test_login_throttle checks it
    seed(ctx)
    with serving(system, clock, executor) as w:
        yield w
    gen.close()


@contextmanager
def serving(system: System, clock: ManualClock, executor: FakeExecutor) -> Iterator[World]:
    """A seeded `system` served to a test client, with a token for each of `USERS`; the
    system is stopped afterwards."""
    ctx: AppContext = system.app.state.ctx
    with TestClient(system.app, raise_server_exceptions=False) as client:
        w = World(system.app, client, ctx, clock, executor)
        for role, name in USERS.items():
            w.tokens[role] = issue_token(ctx, name, "test", None).token
        yield w
    system.stop()
