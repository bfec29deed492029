"""Node pools on the dashboard (issue 34 part 5), in a real browser: the cluster page lists
each pool with its nodes by state (up, requested, booting, powered down), its bounds and its
requests in flight; with no pool defined the section stays hidden."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gpupool.domain.nodepools import NodeRequest, PoolNode, PoolNodeState
from gpupool.store import NodePoolRepo
from tests.pools import h100_pool
from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login, shot

P = PoolNodeState
POOL = h100_pool(min_nodes=0)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """This module's own server (it defines pools)."""
    db = tmp_path_factory.mktemp("web-pools") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=3)
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, app.state.ctx.store)


@pytest.mark.slow
def test_the_cluster_page_shows_the_pools_their_node_states_and_requests(page, live):
    expect = pytest.importorskip("playwright.sync_api").expect
    login(page, "ann")
    expect(page.locator("#nodes section.node").first).to_be_visible()
    expect(page.locator("#pools-section")).to_be_hidden()  # no pool yet

    now = time.time()
    with live.store.write() as s:  # type: ignore[attr-defined]
        repo = NodePoolRepo(s)
        repo.save(POOL, create=True)
        repo.put_node(PoolNode("h100-1", "gpu-h100", P.UP, now, now))
        repo.put_node(PoolNode("h100-2", "gpu-h100", P.BOOTING, now))
        repo.put_node(PoolNode("h100-3", "gpu-h100", P.POWERED_DOWN, now))
        repo.put_request(NodeRequest("req-7", "gpu-h100", 2, ("w-1",), now, atomic=True))
    row = page.locator('#pools tr[data-pool="gpu-h100"]')
    expect(row).to_be_visible()  # the next refresh shows it
    expect(page.locator("#pools-h")).to_have_text("Node pools (1)")
    cells = row.locator("td")
    expect(cells.nth(0)).to_contain_text("8 × H100")
    expect(cells.nth(0)).to_contain_text("boots in ~4 min")
    expect(cells.nth(1)).to_have_text("1")  # up
    expect(cells.nth(2)).to_have_text("0")  # requested
    expect(cells.nth(3)).to_have_text("1")  # booting
    expect(cells.nth(4)).to_have_text("1")  # powered down
    expect(cells.nth(5)).to_have_text("3 (0–4)")
    req = row.locator('li[data-request="req-7"]')
    expect(req).to_contain_text("2 nodes (all or none)")
    expect(req).to_contain_text("unless fulfilled")
    shot(page, "cluster-node-pools")
