"""Fixtures for the dashboard tests: a real uvicorn server on 127.0.0.1 serving the gpupool app
(seeded SQLite store, simulated GPUs, fake executor) and Debian's Chromium driven by
Playwright. Browser tests are skipped where Chromium or Playwright is missing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ServedApp
from tests.web.seed import PASSWORD, Seeded, seed

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


@dataclass
class LiveServer:
    url: str
    app: object
    seeded: Seeded
    store: object


def build_app(db_url: str, seeded_now: float, **seed_kw: object):
    """A gpupool app over a freshly seeded store, with the dashboard router included."""
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.server.settings import Settings
    from gpupool.store import open_store
    from gpupool.system import SystemSettings, build_system

    store = open_store(db_url)
    seeded = seed(store, now=seeded_now, **seed_kw)  # type: ignore[arg-type]
    store.close()
    settings = SystemSettings(server=Settings(database_url=db_url, start_loops=False))
    app = build_system(settings, FakeEngine(), clock=seeded.clock).app
    app.state.ctx.samplers.extend(seeded.samplers)
    return app, seeded


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    pytest.importorskip("gpupool.server.app", reason="the server app is not built yet")
    db = tmp_path_factory.mktemp("web") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=8, workloads=24)
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, None)


@pytest.fixture
def page(browser, live: LiveServer):
    ctx = browser.new_context(
        base_url=live.url, viewport={"width": 1366, "height": 768}, accept_downloads=True
    )
    ctx.set_default_timeout(10_000)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.js_errors = errors  # type: ignore[attr-defined]
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def login(page, user: str, password: str = PASSWORD, next_page: str = "cluster") -> None:
    """Log in through the login form and land on `next_page`."""
    page.goto(f"/dashboard/login?next=/dashboard/{next_page}")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**/dashboard/{next_page}")
    page.locator("#whoami").filter(has_text=user).wait_for()


def shot(page, name: str) -> Path:
    """Save a full-page screenshot under test-artifacts/web/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
