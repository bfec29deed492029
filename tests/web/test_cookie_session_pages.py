"""The dashboard in Chromium on a cookie session, no bearer token in the tab (review F2 of
issue 29): signed in through JupyterHub under /services/gpupool/, and after a direct login
in a new tab. State changes (submit, cancel) carry the session's CSRF token; the cookie stays
on gpupool's own path."""

from __future__ import annotations

import time

import pytest

from tests.support import ServedApp
from tests.web.conftest import build_app
from tests.web.hub_fake import PREFIX, FakeHub, HubLogin, install_fake_hub
from tests.web.seed import PASSWORD

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    db = tmp_path_factory.mktemp("cookie-pages") / "gpupool.db"
    app, _ = build_app(f"sqlite:///{db}", time.time(), gpus=8, workloads=3)
    hub = FakeHub(users={"c-ann": HubLogin("ann")}, next_code="c-ann")
    install_fake_hub(app, hub)
    with ServedApp(app) as url:
        yield url


@pytest.fixture
def context(browser, served):
    ctx = browser.new_context(base_url=served, viewport={"width": 1366, "height": 768})
    ctx.set_default_timeout(10_000)
    yield ctx
    ctx.close()


def _submit_and_cancel(page) -> None:
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("Whole GPUs").fill("1")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#flash")).to_contain_text("Submitted w-")
    wid = page.locator("#flash").inner_text().split()[1].rstrip(".")
    page.once("dialog", lambda d: d.accept())
    page.locator(f"tr[data-id='{wid}']").get_by_role("button", name=f"Cancel {wid}").click()
    expect(page.locator("#flash")).to_contain_text(f"Cancelled {wid}")


def _csrf_headers_seen(page) -> list[str | None]:
    seen: list[str | None] = []

    def record(req) -> None:
        if req.method in ("POST", "DELETE", "PATCH", "PUT") and "/api/v1/" in req.url:
            seen.append(req.headers.get("x-csrf-token"))

    page.on("request", record)
    return seen


def test_dashboard_through_the_hub_sign_on_submits_and_cancels(context):
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    seen = _csrf_headers_seen(page)
    page.goto(PREFIX + "/dashboard/workloads")
    page.wait_for_url(f"**{PREFIX}/dashboard/workloads")
    page.locator("#whoami").filter(has_text="ann").wait_for()
    assert page.evaluate("sessionStorage.getItem('gpupool.token')") is None  # cookie only
    (cookie,) = [c for c in context.cookies() if c["name"] == "gpupool_session"]
    assert cookie["path"] == PREFIX + "/" and cookie["httpOnly"]
    _submit_and_cancel(page)
    assert seen and all(seen), f"state changes without the CSRF header: {seen}"
    assert not errors, errors


def test_dashboard_on_a_direct_login_cookie_in_a_new_tab(context):
    r = context.request.post("/api/v1/auth/login", data={"username": "ann", "password": PASSWORD})
    assert r.ok
    (cookie,) = [c for c in context.cookies() if c["name"] == "gpupool_session"]
    assert cookie["path"] == "/api/v1/"
    page = context.new_page()
    seen = _csrf_headers_seen(page)
    page.goto("/dashboard/workloads")
    page.locator("#whoami").filter(has_text="ann").wait_for()
    _submit_and_cancel(page)
    assert seen and all(seen)
