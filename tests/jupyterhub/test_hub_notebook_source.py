"""While JupyterHub runs, its spawner submits every notebook with its single-user server's
command, which gpupool's engine runs (issue 31, item 3). A notebook without a command (the
dashboard's old "Start notebook", a bare API call) has nothing to run: it is refused before
it enters the queue, so it never holds a GPU (issue 30, item 3), whoever vouches for it."""

from __future__ import annotations

from types import SimpleNamespace

from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.hub.config import HubSettings
from gpupool.server.settings import Settings
from gpupool.store import open_store
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import API, seed, serving

NOTEBOOK = {"kind": "notebook", "gpus": 1, "tenant": "lab"}
SERVICE = "X-Gpupool-Service-Token"


def _system(tmp_path, executor: FakeExecutor, *, hub: bool):
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    seed(SimpleNamespace(clock=executor.clock, store=store))
    settings = SystemSettings(
        server=Settings(database_url=store.url, start_loops=False),
        jupyterhub=hub,
        hub=HubSettings(data_dir=tmp_path / "hub") if hub else None,
        admin="root",
    )
    return build_system(settings, FakeEngine(executor), clock=executor.clock, store=store)


def _submit(w, body: dict, service_token: str | None = None):
    headers = w.h("member") | ({SERVICE: service_token} if service_token else {})
    return w.client.post(API + "/workloads", json=body, headers=headers)


def test_with_the_hub_a_notebook_from_outside_it_is_refused_before_it_holds_a_gpu(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    with serving(_system(tmp_path, executor, hub=True), clock, executor) as w:
        r = _submit(w, NOTEBOOK)
        assert r.status_code == 403, r.text
        detail = r.json()["detail"]
        assert "start yours from the hub's spawn page (/hub/spawn" in detail
        assert "would hold its GPUs with nothing to start it" in detail
        # the hub's admin token does not make it runnable either
        assert _submit(w, NOTEBOOK, w.tokens["admin"]).status_code == 403
        # nothing entered the queue, so nothing can be granted a GPU
        assert w.get("admin", "/workloads", params={"kind": "notebook"}).json() == []
        # a service token that is not an admin's does not vouch
        assert _submit(w, NOTEBOOK, w.tokens["member"]).status_code == 403
        assert _submit(w, NOTEBOOK, "not-a-token").status_code == 401
        # with its server's command (as the hub's spawner sends it): taken, queued
        server = NOTEBOOK | {"command": ["jupyterhub-singleuser"]}
        assert _submit(w, server, w.tokens["admin"]).status_code == 201
        r = _submit(w, NOTEBOOK | {"command": ["jupyter", "lab"]})
        assert r.status_code == 201, r.text
        # and jobs, of course
        r = _submit(w, {"gpus": 1, "tenant": "lab", "command": ["python", "x.py"]})
        assert r.status_code == 201, r.text


def test_without_the_hub_a_notebook_is_taken_from_anywhere(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    with serving(_system(tmp_path, executor, hub=False), clock, executor) as w:
        assert _submit(w, NOTEBOOK).status_code == 201
