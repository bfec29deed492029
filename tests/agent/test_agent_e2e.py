"""End to end: a real `gpupool up` (simulated GPUs, no JupyterHub) and a real `gpupool agent
--simulate` subprocess reporting to it with a node credential made by `gpupool node token
create`. The agent's node is seen in /api/v1/nodes, on the dashboard (Chromium) and in
/metrics; the agent stopped, the node turns `unknown`.

Waits are bounded polls of the real processes (tests.support.wait_for), never sleeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_up import GPUPOOL, PASSWORD, Up, login
from tests.support import free_port, wait_for

pytestmark = pytest.mark.slow
NODE = "gpu-e2e"
#: short, so that the lost-agent check (3 missed reports) ends quickly
INTERVAL = "0.3"


def nodes(url: str, h: dict[str, str]) -> dict[str, dict]:
    r = httpx.get(f"{url}/api/v1/nodes", headers=h)
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()}


def scrape(url: str) -> dict[str, list]:
    text = httpx.get(f"{url}/metrics").text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def agent_series(url: str) -> list:
    return [s for s in scrape(url).get("DCGM_FI_DEV_GPU_UTIL", []) if s.labels["Hostname"] == NODE]


def cli(url: str, token: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUPOOL, *args],
        env=dict(os.environ, GPUPOOL_URL=url, GPUPOOL_TOKEN=token, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_agent_reports_to_gpupool_up_and_its_node_goes_unknown_when_it_stops(tmp_path, browser):
    up = Up(tmp_path / "data", free_port())
    agent = None
    try:
        up.wait_ready()
        h = login(up.url)
        admin_token = h["Authorization"].removeprefix("Bearer ")
        made = cli(up.url, admin_token, "node", "token", "create", NODE, "--json")
        assert made.returncode == 0, made.stderr
        secret = json.loads(made.stdout)["token"]

        refused = cli(
            up.url,
            "",
            "agent",
            "--once",
            "--simulate",
            "1xH100-80GB",
            "--node",
            "elsewhere",
            GPUPOOL_NODE_TOKEN=secret,
        )
        assert refused.returncode == 1
        assert f"reports for node '{NODE}', not 'elsewhere'" in refused.stderr

        agent = subprocess.Popen(
            [*GPUPOOL, "agent", "--url", up.url, "--node", NODE, "--simulate", "4xH100-80GB"]
            + ["--interval", INTERVAL],
            env=dict(os.environ, GPUPOOL_NODE_TOKEN=secret),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        seen = wait_for(
            lambda: (n := nodes(up.url, h).get(NODE)) and n["telemetry"] and n, f"{NODE} reports"
        )
        assert seen["state"] == "ready" and len(seen["gpus"]) == 4
        assert seen["telemetry"]["simulated"] is True and seen["telemetry"]["lost"] is False
        assert len(nodes(up.url, h)) == 2  # gpupool up's own node and the agent's

        assert len(wait_for(lambda: agent_series(up.url), "the agent's GPUs in /metrics")) == 4
        lost = {s.labels["node"]: s.value for s in scrape(up.url)["gpupool_node_agent_lost"]}
        assert lost == {NODE: 0.0}

        page = browser.new_context(base_url=up.url).new_page()
        page.goto("/")
        page.get_by_label("User name").fill("admin")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/dashboard/cluster")
        expect = pytest.importorskip("playwright.sync_api").expect
        expect(page.locator("li.gpu")).to_have_count(6)
        heading = page.locator("h2", has_text=NODE)
        expect(heading).to_contain_text("ready")

        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=30)
        assert agent.returncode == 0, out
        assert "SIMULATED GPUs" in out and f"node {NODE} (4 GPUs, ready)" in out

        gone = wait_for(
            lambda: (n := nodes(up.url, h)[NODE])["state"] == "unknown" and n,
            f"{NODE} to turn unknown",
            timeout=30,
        )
        assert gone["telemetry"]["lost"] is True
        assert agent_series(up.url) == []
        lost = {s.labels["node"]: s.value for s in scrape(up.url)["gpupool_node_agent_lost"]}
        assert lost == {NODE: 1.0}
        page.reload()
        expect(page.locator("h2", has_text=NODE)).to_contain_text("unknown")
        r = httpx.get(f"{up.url}/api/v1/events?kind=node.lost", headers=h)
        assert r.status_code == 200 and NODE in r.text
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait(10)
        up.stop()
