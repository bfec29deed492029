"""gpupool on a real Slurm (scripts/services.sh start_slurm: munged, MariaDB, slurmdbd,
slurmctld, slurmd with four fake GPUs), through `build_system` with the slurm engine over a
real SQLite database. Skipped, with the reason, where that Slurm is not running or we are not
root (slurmd must run the jobs as the members' own Unix accounts)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.domain import Membership, Quota, Role, Tenant, User
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.server.context import AppContext
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import TenantRepo, UserRepo, WorkloadRepo, open_store
from gpupool.system import System, SystemSettings, build_system
from tests.server.conftest import password_hash
from tests.support import wait_for

API = "/api/v1"
#: gpupool users, who are also Unix accounts on this host (made if missing)
MEMBERS = {"slann": "lab", "slbob": "other"}


def _why_not() -> str | None:
    if not os.environ.get("GPUPOOL_TEST_SLURM"):
        return "no Slurm for the tests (scripts/test starts one as root: start_slurm)"
    if os.geteuid() != 0:
        return "the Slurm tests run jobs as other Unix accounts: root only"
    return None


@pytest.fixture(scope="session")
def slurm() -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    for name in MEMBERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def sacct(job_id: str, final: bool = True) -> dict:
    """Slurm's own record of a job (the truth the tests hold gpupool to), once slurmdbd has
    it complete (accounting lags: a fresh record is named "allocation" for a moment)."""

    def record() -> dict | None:
        jobs = json.loads(sh("sacct", "--json", "-X", "--allusers", "-j", job_id))["jobs"]
        if not jobs or jobs[-1]["name"] == "allocation":
            return None
        alive = jobs[-1]["state"]["current"] in ("PENDING", "RUNNING", "COMPLETING")
        return None if final and alive else jobs[-1]

    return wait_for(record, f"sacct's record of job {job_id}", timeout=30)  # type: ignore[return-value]


@dataclass
class SlurmWorld:
    system: System
    client: TestClient
    clock: ManualClock
    tokens: dict[str, str]

    @property
    def ctx(self) -> AppContext:
        return self.system.ctx

    @property
    def engine(self) -> SlurmEngine:
        e = self.system.engine
        assert isinstance(e, SlurmEngine)
        return e

    def h(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def submit(self, user: str, **body) -> dict:
        r = self.client.post(API + "/workloads", json=body, headers=self.h(user))
        assert r.status_code == 201, r.text
        self.clock.advance(1)
        return r.json()

    def get(self, user: str, wid: str) -> dict:
        r = self.client.get(f"{API}/workloads/{wid}", headers=self.h(user))
        assert r.status_code == 200, r.text
        return r.json()

    def schedule(self) -> None:
        loop = self.ctx.loops.get("scheduler")
        assert isinstance(loop, SchedulerLoop)
        loop.run_once()

    def reconcile(self):  # noqa: ANN201
        loop = self.ctx.loops.get("reconciler")
        assert isinstance(loop, ReconcilerLoop)
        return loop.run_once()

    def job_id(self, wid: str) -> str:
        ex = self.engine.executor
        assert ex is not None
        return ex._jobs[wid].job_id

    def settle(self, wid: str, states: set[str], user: str = "slann") -> dict:
        def done() -> dict | None:
            self.reconcile()
            w = self.get(user, wid)
            return w if w["state"] in states else None

        return wait_for(done, f"{wid} to become one of {states}", timeout=30)  # type: ignore[return-value]


def seed(store, now: float) -> None:  # noqa: ANN001
    with store.write() as s:
        tenants = TenantRepo(s)
        tenants.save(Tenant("lab", Quota.gpus(1, 2)), now)
        tenants.save(Tenant("other", Quota.gpus(1, 4)), now)
        users = UserRepo(s)
        users.create(User("root", admin=True), password_hash(), now)
        for name, tenant in MEMBERS.items():
            users.create(User(name), password_hash(), now)
            users.set_membership(Membership(name, tenant, Role.MEMBER))


@pytest.fixture
def output_dir() -> Iterator[Path]:
    """Jobs' output files: directly under /tmp (pytest's tmp dirs are 0700: the jobs' own
    accounts could not reach them)."""
    d = Path(tempfile.mkdtemp(prefix="gpupool-slurm-out-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_world(slurm, tmp_path, output_dir) -> Iterator[Callable[[], SlurmWorld]]:
    """Builds systems over one SQLite database (a second one = gpupool restarted)."""
    url = f"sqlite:///{tmp_path}/gpupool.db"
    clock = ManualClock(time.time())
    built: list[tuple[System, TestClient]] = []

    def make() -> SlurmWorld:
        store = open_store(url)
        if not built:
            seed(store, clock.now())
        engine = SlurmEngine(SlurmOptions(output_dir=output_dir, accounts_interval_s=0))
        settings = Settings(database_url=url, start_loops=False)
        system = build_system(SystemSettings(server=settings), engine, clock=clock, store=store)
        client = TestClient(system.app, raise_server_exceptions=False)
        client.__enter__()
        built.append((system, client))
        tokens = {n: issue_token(system.ctx, n, "test", None).token for n in ("root", *MEMBERS)}
        return SlurmWorld(system, client, clock, tokens)

    yield make
    for system, client in built:
        for wid in _active(system):
            subprocess.run(["scancel", "--name", f"gpupool-{wid}"], capture_output=True)
        client.__exit__(None, None, None)
        system.stop()
        system.ctx.store.close()


def _active(system: System) -> list[str]:
    with system.ctx.store.read() as s:
        return [r.workload.id for r in WorkloadRepo(s).list() if r.workload.active]
