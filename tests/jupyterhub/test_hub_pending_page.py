"""The hub's spawn-pending page, in Chromium against a real JupyterHub and gpupool (issue 30,
items 3 and 5). A hub user opens the dashboard from the hub, presses "Start notebook": the
hub's spawn page spawns the notebook with that profile (gpupool made none of its own). While
both GPUs are taken the pending page has one live message that says the notebook is queued,
and where, with the bar at 0; no banner drawn once at load, no "Your server is starting up".
Once a GPU frees, the notebook starts by itself and the page opens it."""

from __future__ import annotations

import shutil

import pytest

from tests.jupyterhub.stack import PASSWORD, Stack, build, wait_for
from tests.web.conftest import shot

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("configurable-http-proxy") is None,
        reason="configurable-http-proxy missing; scripts/test installs it with npm",
    ),
]
SPAWN_S = 180


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    st = build(tmp_path_factory.mktemp("hub-pending"))
    yield st
    st.close()


def _hold_both_gpus(stack: Stack) -> list[str]:
    """Two running jobs of the tenant `other` on both GPUs: a notebook of lab must wait."""
    ids = []
    for _ in range(2):
        job = {"gpus": 1, "tenant": "other", "command": ["sleep", "600"]}
        r = stack.gpupool("POST", "/workloads", json=job)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    for wid in ids:
        wait_for(
            lambda w=wid: stack.gpupool("GET", f"/workloads/{w}").json()["state"] == "running",
            f"job {wid} running",
            30,
        )
    return ids


def test_dashboard_start_goes_to_the_hub_whose_pending_page_says_queued(stack, browser):
    jobs = _hold_both_gpus(stack)
    ctx = browser.new_context(base_url=stack.hub.public_url)
    try:
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        page.goto("/hub/login")
        page.fill("#username_input", "carol")
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")
        page.wait_for_url("**/hub/**")
        # the dashboard, signed on through the hub: its "Start notebook" opens the hub
        page.goto("/services/gpupool/dashboard/workloads")
        start = page.locator("#nb-start")
        start.filter(has_text="Start notebook in JupyterHub").wait_for()
        page.check("input[name=profile][value=gpu]")
        start.click()
        page.wait_for_url("**/hub/spawn-pending/carol**")
        (nb,) = [w for w in stack.notebooks("carol") if w["state"] == "pending"]
        assert nb["profile"] == "gpu" and nb["name"] == "jupyterhub/carol/default"

        msg = page.locator("#progress-message")
        msg.filter(has_text="Queued for a GPU: 1st in line for lab").wait_for()
        bar = page.locator("#progress-bar")
        assert bar.get_attribute("aria-valuenow") == "0"  # queued: the bar does not move
        body = page.locator("body").inner_text()
        assert "starting up" not in body  # the hub's own line would contradict "queued"
        assert page.locator(".announcement").count() == 0  # no banner drawn once at load
        assert "Queued for a GPU" not in body.replace(msg.inner_text(), "")  # said once
        shot(page, "hub-pending-queued")

        # a GPU frees: the notebook starts by itself and the page opens it
        assert stack.gpupool("DELETE", f"/workloads/{jobs[0]}").status_code == 200
        page.wait_for_url("**/user/carol/**", timeout=SPAWN_S * 1000)
        assert stack.ready("carol")
    finally:
        ctx.close()
        for wid in jobs:
            stack.gpupool("DELETE", f"/workloads/{wid}")
