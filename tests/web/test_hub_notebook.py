"""With JupyterHub running beside gpupool, the dashboard's "Start notebook" opens the hub's
spawn page for the chosen profile (the hub starts notebooks; one submitted to gpupool from
the dashboard would be granted its GPU and never started: issue 30, item 3). The hub itself
is not run here: its spawn page is answered by a stand-in that records what was asked."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from gpupool.engines.fake.engine import FakeEngine
from gpupool.server.hub.config import HubSettings
from gpupool.server.settings import Settings
from gpupool.store import open_store
from gpupool.system import SystemSettings, build_system
from tests.support import ServedApp
from tests.web.conftest import login, shot
from tests.web.seed import PASSWORD, seed

HUB_PORT = 18_765  # never listened on: the browser's requests to it are answered by a route


@pytest.fixture(scope="module")
def hub_live(tmp_path_factory):
    root = tmp_path_factory.mktemp("web-hub")
    db_url = f"sqlite:///{root / 'gpupool.db'}"
    store = open_store(db_url)
    seeded = seed(store, now=time.time(), gpus=4, workloads=0)
    store.close()
    hub = HubSettings(data_dir=root / "hub", port=HUB_PORT)
    settings = SystemSettings(
        server=Settings(database_url=db_url, start_loops=False), jupyterhub=True, hub=hub
    )
    system = build_system(settings, FakeEngine(), clock=seeded.clock)
    with ServedApp(system.app) as url:
        yield url


@pytest.fixture
def hub_page(browser, hub_live):
    ctx = browser.new_context(base_url=hub_live, viewport={"width": 1366, "height": 768})
    ctx.set_default_timeout(10_000)
    asked: list[str] = []

    def spawn_page(route):
        asked.append(route.request.url)
        route.fulfill(status=200, content_type="text/html", body="<h1>JupyterHub spawn</h1>")

    ctx.route(f"http://127.0.0.1:{HUB_PORT}/**", spawn_page)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg, asked
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def _notebooks(url: str) -> list[dict]:
    tok = httpx.post(
        f"{url}/api/v1/auth/login", json={"username": "root", "password": PASSWORD}
    ).json()["token"]
    r = httpx.get(
        f"{url}/api/v1/workloads",
        params={"kind": "notebook"},
        headers={"Authorization": f"Bearer {tok}"},
    )
    return r.json()


def test_start_notebook_opens_the_hubs_spawn_page_for_the_profile(hub_page, hub_live):
    page, asked = hub_page
    login(page, "ann", next_page="workloads")
    button = page.locator("#nb-start")
    expect(button).to_have_text("Start notebook in JupyterHub")
    expect(page.locator("#nb-hub")).to_be_visible()
    shot(page, "workloads-with-hub")
    page.get_by_label("quarter").check()
    button.click()
    page.wait_for_url(f"http://127.0.0.1:{HUB_PORT}/hub/spawn?**")
    (url,) = asked
    parts = urlsplit(url)
    assert parts.path == "/hub/spawn"
    assert parse_qs(parts.query) == {"opt-profile": ["quarter"], "opt-tenant": ["physics/lab-a"]}
    # the dashboard made no notebook of its own: nothing holds a GPU for nobody
    assert _notebooks(hub_live) == []


def test_the_hub_link_is_same_origin_through_the_hub(hub_live):
    """Served through the hub (/services/gpupool), the spawn page is on the same origin."""
    tok = httpx.post(
        f"{hub_live}/api/v1/auth/login", json={"username": "ann", "password": PASSWORD}
    ).json()["token"]
    auth = {"Authorization": f"Bearer {tok}"}
    direct = httpx.get(f"{hub_live}/api/v1/dashboard/hub", headers=auth).json()
    assert direct == {"spawn_url": f"http://127.0.0.1:{HUB_PORT}/hub/spawn"}
    proxied = httpx.get(f"{hub_live}/services/gpupool/api/v1/dashboard/hub", headers=auth)
    assert proxied.json() == {"spawn_url": "/hub/spawn"}
