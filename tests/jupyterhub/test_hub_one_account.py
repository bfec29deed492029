"""Without root, every notebook would run as the server's one account, where one user's
notebook or job can rewrite another's (review F2b of issue 29): the hub then serves the first
admin only, and the API refuses anyone else's notebook with a 403 that says why."""

from __future__ import annotations

from types import SimpleNamespace

from gpupool.clock import ManualClock
from gpupool.engines.common.executor import ExecutorWithNotebooks
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.hub.config import HubSettings
from gpupool.server.settings import Settings
from gpupool.store import open_store
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import API, seed, serving

NOTEBOOK = {"kind": "notebook", "gpus": 1, "tenant": "lab", "command": ["jupyterhub-singleuser"]}


def _from_hub(w, role: str):
    """Submit NOTEBOOK as `role` the way the hub's spawner does: the hub's admin token vouches
    (X-Gpupool-Service-Token); gpupool takes such notebooks only from the hub."""
    headers = w.h(role) | {"X-Gpupool-Service-Token": w.tokens["admin"]}
    return w.client.post(API + "/workloads", json=NOTEBOOK, headers=headers)


class OneAccount(FakeExecutor, ExecutorWithNotebooks):
    """Runs every user's work as one account (the local executor without root)."""

    @property
    def one_account(self) -> bool:
        return True


def _system(tmp_path, executor: FakeExecutor, said: list[str] | None = None):
    said = [] if said is None else said
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    clock = executor.clock
    seed(SimpleNamespace(clock=clock, store=store))  # "root" is the first admin
    hub = HubSettings(data_dir=tmp_path / "hub")
    settings = SystemSettings(
        server=Settings(database_url=store.url, start_loops=False),
        jupyterhub=True,
        hub=hub,
        admin="root",
    )
    return build_system(
        settings,
        FakeEngine(executor),
        clock=clock,
        store=store,
        say=lambda msg, loud=False: said.append(msg),
    )


def test_a_members_notebook_is_refused_when_all_share_one_account(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    executor = OneAccount(clock)
    said: list[str] = []
    with serving(_system(tmp_path, executor, said), clock, executor) as w:
        assert any("JupyterHub serves 'root' only" in line for line in said), said
        r = _from_hub(w, "member")
        assert r.status_code == 403, r.text
        detail = r.json()["detail"]
        assert "serves only 'root'" in detail and "run gpupool as root" in detail
        assert _from_hub(w, "admin").status_code == 201
        job = {"gpus": 1, "tenant": "lab", "command": ["python", "x.py"]}
        assert w.post("member", "/workloads", json=job).status_code == 201  # jobs: as before


def test_a_members_notebook_queued_before_fails_at_admission_with_the_reason(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    executor = OneAccount(clock)
    with serving(_system(tmp_path, executor), clock, executor) as w:
        w.ctx.notebook_owner = "ann"  # the rule did not refuse it at submit...
        wid = _from_hub(w, "member").json()["id"]
        w.ctx.notebook_owner = "root"  # ...and applies when it is admitted
        w.scheduler.run_once()
        got = w.get("admin", f"/workloads/{wid}").json()
        assert got["state"] == "failed" and "serves only 'root'" in got["reason"]
        assert executor.world.launches == []  # never started


def test_with_an_account_per_user_every_members_notebook_is_taken(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    with serving(_system(tmp_path, executor), clock, executor) as w:
        assert _from_hub(w, "member").status_code == 201
