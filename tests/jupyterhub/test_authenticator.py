"""GpupoolAuthenticator names the person's address when it logs in for them, so gpupool's
per-address login throttle counts each person, not the hub (issue 13, item 4). A real
gpupool server over uvicorn (which trusts X-Forwarded-For from loopback)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.jupyterhub.authenticator import GpupoolAuthenticator
from gpupool.server.settings import Settings
from gpupool.store import open_store
from gpupool.store.throttle import LoginThrottleRepo
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import PASSWORD, seed
from tests.support import ServedApp


@pytest.fixture
def served(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    clock = ManualClock(1_780_000_000.0)
    settings = Settings(database_url=store.url, start_loops=False)
    app = build_system(
        SystemSettings(server=settings), FakeEngine(FakeExecutor(clock)), clock=clock, store=store
    ).app
    seed(app.state.ctx)
    with ServedApp(app) as url:
        yield url, store
    store.close()


def test_hub_logins_are_throttled_per_person_address(served):
    url, store = served
    auth = GpupoolAuthenticator(gpupool_url=url)
    handler = SimpleNamespace(request=SimpleNamespace(remote_ip="203.0.113.9"))
    wrong = asyncio.run(auth.authenticate(handler, {"username": "ann", "password": "nope-nope"}))
    assert wrong is None
    ok = asyncio.run(auth.authenticate(handler, {"username": "vic", "password": PASSWORD}))
    assert ok is not None and ok["name"] == "vic"
    with store.read() as s:
        keys = set(LoginThrottleRepo(s).get_many(["client:203.0.113.9", "client:127.0.0.1"]))
    assert keys == {"client:203.0.113.9"}
