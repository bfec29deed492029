"""MIG on the dashboard in a real browser: the admin cuts a free GPU (MIG mode on in its
simulated telemetry) into a layout on the admin page; the cluster page shows its instances;
a GPU whose MIG mode is off is refused with what to do."""

from __future__ import annotations

import time

import pytest

from gpupool.store import AllocationRepo, NodeRepo
from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login, shot

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A server with GPUs to spare (few workloads), for this module only."""
    db = tmp_path_factory.mktemp("web-mig") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=3)
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, None)


def _free_gpus(live) -> list[tuple[object, int, str]]:
    """(source, index, uuid) of simulated GPUs no workload holds."""
    ctx = live.app.state.ctx
    with ctx.store.read() as s:
        held = {u for a in AllocationRepo(s).active() for u in a.gpu_uuids}
        uuids = [g.uuid for n in NodeRepo(s).list() for g in n.gpus]
    out = []
    for src in live.seeded.sources:
        for i in range(len(src.snapshot().gpus)):
            if src.uuid(i) in uuids and src.uuid(i) not in held:
                out.append((src, i, src.uuid(i)))
    return out


def test_admin_cuts_a_gpu_into_mig_instances_and_the_cluster_shows_them(page, live):
    (src, i, uuid), (_, _, off_uuid), *_ = _free_gpus(live)
    src.set_mig(i, "all-1g.10gb")  # as an admin with nvidia-smi would
    for sampler in live.seeded.samplers:
        sampler.sample_once()
    login(page, "root", next_page="admin")
    row = page.locator("#gpus-table tbody tr").filter(has_text=uuid)
    row.get_by_role("combobox").select_option("mig")
    row.get_by_label("MIG layout").fill("all-1g.10gb")
    row.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_contain_text("is now mig (all-1g.10gb)")
    off = page.locator("#gpus-table tbody tr").filter(has_text=off_uuid)
    off.get_by_role("combobox").select_option("mig")
    off.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_contain_text("MIG mode off")
    expect(page.locator("#flash")).to_contain_text("-mig 1")

    page.goto("/dashboard/cluster")
    tile = page.locator(f'li.gpu[data-uuid="{uuid}"]')
    expect(tile).to_contain_text("mig · all-1g.10gb")
    expect(tile.locator("ul.mig li")).to_have_count(7)
    expect(tile.locator("ul.mig li").first).to_contain_text("1g.10gb @0")
    expect(tile.locator("ul.mig li.free")).to_have_count(7)
    shot(page, "cluster-mig")
