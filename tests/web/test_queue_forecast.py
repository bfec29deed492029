"""The queue page in a real browser says when pending work is expected to start (issue 35
part 1): the forecast stored by the forecast loop, relative to now, its words and what it
rests on in the cell's title."""

from __future__ import annotations

import re
import time

import pytest

from gpupool.domain import Request, Workload
from gpupool.scheduler.types import PendingInfo
from gpupool.sim.forecast import Forecast
from gpupool.store import WorkloadRepo
from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login
from tests.web.seed import LEAVES

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    db = tmp_path_factory.mktemp("web-forecast") / "gpupool.db"
    now = time.time()
    app, seeded = build_app(f"sqlite:///{db}", now, gpus=4, workloads=0)
    tenant, owner = next(iter(LEAVES.items()))
    f = Forecast(
        expected=now + 1800,
        latest=now + 7200,
        until=now + 86400,
        basis="rests on when 2 workloads ahead of it end: 2 from declared max runtimes",
        runtime_s=3600,
        runtime_basis="a default of 1 h (no past runs of 1-GPU jobs)",
        made_at=now,
    )
    with app.state.ctx.store.write() as s:
        repo = WorkloadRepo(s)
        repo.add(Workload("w-later", tenant, owner, Request(gpus=1), command=("x",)))
        repo.set_pending_info({"w-later": PendingInfo("no GPU is free", 1, 1)})
        repo.set_forecasts({"w-later": f})
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, None)


def test_queue_says_when_work_is_expected_to_start(page, live):
    login(page, "root", next_page="queue")
    row = page.locator("#pending tbody tr").filter(has_text="w-later")
    cell = row.locator("td").nth(7)
    expect(cell).to_contain_text("in ~")
    expect(cell).to_contain_text("at the latest")
    expect(cell).to_have_attribute("title", re.compile("2 workloads ahead of it end"))
