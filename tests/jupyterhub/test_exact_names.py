"""Hub user names are gpupool user names exactly (review F9 of issue 29): JupyterHub's default
lowercasing turned gpupool's `Dave` into the hub user `dave`, whom the sign-on and spawner
then treated as the different gpupool user `dave`. A real gpupool server over uvicorn."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import User
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.jupyterhub.authenticator import GpupoolAuthenticator
from gpupool.jupyterhub.client import GpupoolAPIError
from gpupool.jupyterhub.spawner import GpupoolSpawner
from gpupool.server.security import hash_password
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import UserRepo, open_store
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import PASSWORD, seed
from tests.support import ServedApp

HANDLER = SimpleNamespace(request=SimpleNamespace(remote_ip="203.0.113.9"))


@pytest.fixture
def served(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    clock = ManualClock(1_780_000_000.0)
    settings = Settings(database_url=store.url, start_loops=False)
    app = build_system(
        SystemSettings(server=settings), FakeEngine(FakeExecutor(clock)), clock=clock, store=store
    ).app
    seed(app.state.ctx)
    with store.write() as s:  # two users that differ only in case, as an older release allowed
        for name in ("Dave", "dave"):
            UserRepo(s).create(User(name), hash_password(PASSWORD), clock.now())
    with ServedApp(app) as url:
        yield url, app.state.ctx
    store.close()


def test_the_hub_keeps_the_gpupool_name_as_gpupool_spells_it(served):
    url, _ = served
    auth = GpupoolAuthenticator(gpupool_url=url)
    assert auth.normalize_username("Dave") == "Dave"
    # JupyterHub's own path: authenticate, then normalize, validate and allow
    got = asyncio.run(
        auth.get_authenticated_user(HANDLER, {"username": "Dave", "password": PASSWORD})
    )
    assert got is not None and got["name"] == "Dave"
    assert got["auth_state"]["gpupool_user"] == "Dave"
    assert auth.validate_username("Dave")
    other = asyncio.run(
        auth.get_authenticated_user(HANDLER, {"username": "dave", "password": PASSWORD})
    )
    assert other is not None and other["name"] == "dave"


def _spawner(url: str, hub_name: str, auth_state: dict | None) -> GpupoolSpawner:
    async def get_auth_state() -> dict | None:
        return auth_state

    user = SimpleNamespace(name=hub_name, get_auth_state=get_auth_state, url=f"/user/{hub_name}/")
    return GpupoolSpawner(user=user, gpupool_url=url)


def test_the_spawner_refuses_a_gpupool_token_of_another_user(served):
    url, ctx = served
    daves = issue_token(ctx, "Dave", "jupyterhub-login", None).token
    spawner = _spawner(url, "dave", {"gpupool_token": daves})
    with pytest.raises(GpupoolAPIError) as e:
        asyncio.run(spawner._checked_user_client())
    assert e.value.status == 403
    assert "'dave'" in e.value.message and "'Dave'" in e.value.message
    assert spawner.user_token == ""  # not kept for later calls


def test_the_spawner_acts_as_the_user_of_exactly_its_name(served):
    url, ctx = served
    token = issue_token(ctx, "Dave", "jupyterhub-login", None).token
    spawner = _spawner(url, "Dave", {"gpupool_token": token})

    async def who() -> str:
        client = await spawner._checked_user_client()
        try:
            return (await client.me())["name"]
        finally:
            await client.aclose()

    assert asyncio.run(who()) == "Dave"
