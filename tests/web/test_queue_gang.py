"""The queue page in a real browser shows what a multi-node workload (a gang) holds on each
of its nodes, in rank order, next to one-node work."""

from __future__ import annotations

import time

import pytest

from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login, shot

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """Two nodes of four GPUs; `w-gang` holds GPUs 0 and 1 of both (rank 0 on sim-1), and
    two one-node workloads hold sim-0's GPU 2 and half of its shared GPU 3."""
    db = tmp_path_factory.mktemp("web-gang") / "gpupool.db"
    app, seeded = build_app(
        f"sqlite:///{db}", time.time(), gpus=8, nodes=2, workloads=6, gang_gpus_per_node=2
    )
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, None)


def test_queue_shows_every_node_of_a_multi_node_workload(page, live):
    login(page, "root", next_page="queue")
    running = page.locator("#running tbody")
    gang = running.locator("tr").filter(has_text="w-gang")
    # Shares grouped by node in the allocation's rank order (sim-1 is rank 0).
    expect(gang.locator("td").nth(4)).to_have_text("sim-1: GPU 0, 1; sim-0: GPU 0, 1")
    # One-node work reads as before.
    expect(running.locator("tr").filter(has_text="w-run00000").locator("td").nth(4)).to_have_text(
        "sim-0: GPU 2"
    )
    expect(running.locator("tr").filter(has_text="w-run00001").locator("td").nth(4)).to_have_text(
        "sim-0: GPU 3 (0.5)"
    )
    expect(page.locator("#running-count")).to_have_text("(3)")
    shot(page, "queue-gang")
