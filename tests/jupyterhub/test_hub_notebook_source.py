"""While JupyterHub runs, the hub starts the notebooks that have no command of their own: a
notebook submitted anywhere else (the dashboard's old "Start notebook", the API) would be
granted its GPUs and sit in `starting` with nothing to start it until the launch timed out
(issue 30, item 3). gpupool takes such a notebook only from the hub (its admin token vouches,
as the spawner sends it); anywhere else it is refused before it enters the queue."""

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
        hub=HubSettings(data_dir=tmp_path / "hub", launch_dir=tmp_path / "launch") if hub else None,
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
        # nothing entered the queue, so nothing can be granted a GPU
        assert w.get("admin", "/workloads", params={"kind": "notebook"}).json() == []
        # a service token that is not an admin's does not vouch
        assert _submit(w, NOTEBOOK, w.tokens["member"]).status_code == 403
        assert _submit(w, NOTEBOOK, "not-a-token").status_code == 401
        # the hub's spawner sends its admin token: taken, queued as before
        r = _submit(w, NOTEBOOK, w.tokens["admin"])
        assert r.status_code == 201, r.text
        # a notebook with its own command is not the hub's to start: taken as before
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
