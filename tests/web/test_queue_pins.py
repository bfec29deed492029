"""The queue page in a real browser tells where pinned work may run (issue 31): its asks
cell's title carries the engine and node labels after the request."""

from __future__ import annotations

import time

import pytest

from gpupool.domain import Request, Workload
from gpupool.store import WorkloadRepo
from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login
from tests.web.seed import LEAVES

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    db = tmp_path_factory.mktemp("web-pins") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=0)
    tenant, owner = next(iter(LEAVES.items()))
    pinned = Request(gpus=1, engine="slurm", node_labels=(("zone", "a"),))
    with app.state.ctx.store.write() as s:
        WorkloadRepo(s).add(Workload("w-pinned", tenant, owner, pinned, command=("x",)))
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, None)


def test_queue_tells_where_pinned_work_may_run(page, live):
    login(page, "root", next_page="queue")
    row = page.locator("#pending tbody tr").filter(has_text="w-pinned")
    expect(row.locator("td.asks")).to_have_attribute("title", "1 GPU on slurm, zone=a")
