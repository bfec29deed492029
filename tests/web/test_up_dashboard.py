"""End to end: `gpupool up --simulate` serves the dashboard; an admin logs in through the
browser, runs a real job (local executor), reads its output, sees it on its GPU, cancels it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.support import end_process, free_port, wait_for
from tests.web.conftest import ARTIFACTS

pytestmark = pytest.mark.slow
expect = pytest.importorskip("playwright.sync_api").expect
PASSWORD = "admin-pass-123"


@pytest.fixture
def up_server(tmp_path):
    port = free_port()
    env = {**os.environ, "GPUPOOL_ADMIN_PASSWORD": PASSWORD}
    cmd = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]
    cmd += ["up", "--simulate", "2xH100-80GB", "--no-jupyterhub"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--port", str(port), "--user-mode", "single-user"]
    if os.geteuid() == 0:  # jobs run as an existing unprivileged account: none is created
        cmd += ["--jobs-account", "nobody"]
    log = open(tmp_path / "up.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    log_text = (tmp_path / "up.log").read_text

    def answers() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"gpupool up exited: {log_text()}")
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(answers, "gpupool up to answer /healthz")
        yield url
    finally:
        end_process(proc, signal.SIGINT, timeout=30)
        log.close()


def test_dashboard_on_gpupool_up_runs_a_real_job(browser, up_server):
    ctx = browser.new_context(base_url=up_server, viewport={"width": 1366, "height": 768})
    page = ctx.new_page()
    page.goto("/")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/dashboard/cluster")
    expect(page.locator("li.gpu")).to_have_count(2)
    page.goto("/dashboard/workloads")
    page.get_by_label("Command").fill("sh -c 'echo hello from gpupool; sleep 120'")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#flash")).to_contain_text("Submitted w-")
    wid = page.locator("#flash").inner_text().split()[1].rstrip(".")
    row = page.locator(f"tr[data-id='{wid}']")
    expect(row).to_contain_text("running")
    row.get_by_role("button", name="Logs").click()
    expect(page.locator("#logs")).to_contain_text("hello from gpupool")
    page.goto("/dashboard/cluster")
    expect(page.locator("li.gpu .holders").first).to_contain_text(wid)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "up-cluster.png"), full_page=True)
    page.goto("/dashboard/workloads")
    page.once("dialog", lambda d: d.accept())
    page.locator(f"tr[data-id='{wid}']").get_by_role("button", name=f"Cancel {wid}").click()
    expect(page.locator("#flash")).to_contain_text(f"Cancelled {wid}")
    ctx.close()
