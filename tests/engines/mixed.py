"""Helpers of the tests of one pool over several engines (tests/slurm/test_mixed_pool.py,
tests/kubernetes/test_mixed_pool_k8s.py): jobs that count their starts in marker files, the
tenants and members both seed, and a built system driven by hand (its loops run once per
call, the clock moves only when a test says)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.domain import Membership, Quota, Role, Tenant, User
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.store import Store, TenantRepo, UserRepo
from gpupool.system import System
from tests.server.conftest import password_hash
from tests.support import wait_for

API = "/api/v1"
#: the members: slann in tenant lab, slbob in tenant other (and root, an admin)
MEMBERS = (("slann", "lab"), ("slbob", "other"))


@contextlib.contextmanager
def marker_dir() -> Iterator[Path]:
    """Where each job appends a line per start: world-writable (jobs run as the members' and
    gpupool's own accounts), directly under /tmp (pytest's tmp dirs are 0700); removed
    afterwards. Each test module's `markers` fixture."""
    d = Path(tempfile.mkdtemp(prefix="gpupool-mixed-markers-"))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def marked(markers: Path, seconds: int = 300) -> list[str]:
    """A job that appends one line to `markers/<workload id>` when it starts, then sleeps."""
    return ["sh", "-c", f'echo start >> {markers}/"$GPUPOOL_WORKLOAD_ID"; exec sleep {seconds}']


def starts(markers: Path, wid: str) -> int:
    """How often the job of `wid` started (lines in its marker file)."""
    f = markers / wid
    return len(f.read_text().splitlines()) if f.exists() else 0


def seed_members(store: Store, now: float, limit: int) -> None:
    """Tenants `lab` (guaranteed 2) and `other` (guaranteed 1), both up to `limit` GPUs; the
    admin root and the members of `MEMBERS`."""
    with store.write() as s:
        TenantRepo(s).save(Tenant("lab", Quota.gpus(2, limit)), now)
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, limit)), now)
        users = UserRepo(s)
        users.create(User("root", admin=True), password_hash(), now)
        for name, tenant in MEMBERS:
            users.create(User(name), password_hash(), now)
            users.set_membership(Membership(name, tenant, Role.MEMBER))


@dataclass
class Driven:
    """A built system served to a test client, its loops driven by hand."""

    system: System
    client: TestClient
    clock: ManualClock
    tokens: dict[str, str]

    def h(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def submit(self, user: str, **body) -> str:
        """Submit as `user` (201 expected); the clock then moves on 1 s."""
        r = self.client.post(API + "/workloads", json=body, headers=self.h(user))
        assert r.status_code == 201, r.text
        self.clock.advance(1)
        return r.json()["id"]

    def get(self, user: str, wid: str) -> dict:
        r = self.client.get(f"{API}/workloads/{wid}", headers=self.h(user))
        assert r.status_code == 200, r.text
        return r.json()

    def schedule(self) -> None:
        loop = self.system.ctx.loops.get("scheduler")
        assert isinstance(loop, SchedulerLoop)
        loop.run_once()

    def reconcile(self) -> None:
        loop = self.system.ctx.loops.get("reconciler")
        assert isinstance(loop, ReconcilerLoop)
        loop.run_once()

    def step(self) -> None:
        """What moves work on between two looks at it (`settle`): a reconciler pass."""
        self.reconcile()

    def settle(self, user: str, wid: str, states: set[str], timeout: float = 60) -> dict:
        """`wid` as `user` sees it once it is in one of `states` (`step` between looks)."""

        def done() -> dict | None:
            self.step()
            w = self.get(user, wid)
            return w if w["state"] in states else None

        return wait_for(done, f"{wid} to become one of {states}", timeout=timeout)  # type: ignore[no-any-return]
