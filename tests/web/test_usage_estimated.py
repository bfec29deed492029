"""The usage page tells estimated busy time apart, as `gpupool usage` does: GPU-hours of MPS
shares, whose busy time is estimated (docs/telemetry.md "Busy time under MPS"), are marked
~ with a title and a note saying why, and usage with busy time neither measured nor
estimated shows — (unknown), not 0 % efficiency. In Chromium against a real server."""

from __future__ import annotations

import csv
import io
import re
import time

import pytest

from gpupool.store import UsageRepo
from tests.web.conftest import login, shot

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect

H = 3600.0
MARKED = re.compile(r"^~")  # a value marked partly estimated


def _add_mps_usage(store) -> None:
    today = time.strftime("%Y-%m-%d", time.gmtime())
    with store.write() as s:
        u = UsageRepo(s)
        # dora's half-GPU MPS job: 5 GPU-h, busy 3 of them, all of it estimated
        u.add(
            workload_id="w-mps",
            tenant="bio",
            user="dora",
            day=today,
            gpu_seconds_allocated=5 * H,
            gpu_seconds_busy=3 * H,
            gpu_seconds_measured=0.0,
            gpu_seconds_estimated=5 * H,
        )
        # eve's job: 2 GPU-h that telemetry neither measured nor estimated
        u.add(
            workload_id="w-dark",
            tenant="bio",
            user="eve",
            day=today,
            gpu_seconds_allocated=2 * H,
            gpu_seconds_measured=0.0,
        )


def busy_of(row):
    """The Busy GPU-h cell of a chargeback row (key, allocated, busy, ...)."""
    return row.locator("td").nth(2)


def test_usage_page_marks_estimated_and_unknown_busy_time(page, live):
    _add_mps_usage(live.app.state.ctx.store)
    login(page, "root", next_page="usage")

    eff = page.locator("#efficiency tbody")
    dora = eff.locator("tr", has_text="dora").locator("td")
    expect(dora.nth(1)).to_have_text("5.00")
    expect(dora.nth(2)).to_have_text("~3.00")
    expect(dora.nth(3)).to_have_text("~60%")
    expect(dora.nth(2)).to_have_attribute("title", re.compile("^Partly estimated.*MPS"))
    expect(dora.nth(3)).to_have_attribute("title", re.compile("^Partly estimated.*MPS"))
    eve = eff.locator("tr", has_text="eve").locator("td")
    expect(eve.nth(2)).to_have_text("—")
    expect(eve.nth(3)).to_have_text("—")  # unknown, not 0 %
    expect(eff.locator("tr").last).to_contain_text("eve")  # unknown efficiency sorts last
    ann = eff.locator("tr", has_text="ann").locator("td")  # measured: unmarked
    expect(ann.nth(2)).not_to_contain_text("~")
    expect(ann.nth(2)).not_to_have_attribute("title", re.compile("estimated"))
    note = page.locator("#eff-estimated")
    expect(note).to_be_visible()
    expect(note).to_contain_text("estimated")

    # the chart of GPU-hours per user marks dora's busy bar, and only hers; eve, unknown,
    # gets no busy bar (not a 0 bar, which reads as idle) and a hover saying "unknown"
    page.locator("#chart-user .main-svg").first.wait_for()
    trace = page.evaluate(
        "() => { const t = document.getElementById('chart-user').data[1];"
        " return { name: t.name, x: t.x, y: t.y, text: t.text, hover: t.customdata }; }"
    )
    marks = dict(zip(trace["x"], trace["text"], strict=True))
    assert marks["dora"] == "~" and marks["ann"] == "" and marks["eve"] == ""
    assert "estimated" in trace["name"]
    busy = dict(zip(trace["x"], trace["y"], strict=True))
    hover = dict(zip(trace["x"], trace["hover"], strict=True))
    assert busy["eve"] is None
    assert busy["dora"] == pytest.approx(3.0) and busy["ann"] is not None
    assert hover["eve"].startswith("unknown")
    assert hover["dora"].startswith("~3.00 GPU-h") and "estimated" in hover["dora"]
    assert "unknown" not in hover["ann"] and not hover["ann"].startswith("~")

    # chargeback: bio's busy GPU-h and the total include dora's estimate, marked so
    charge = page.locator("#chargeback tbody")
    expect(busy_of(charge.locator("tr", has_text="bio"))).to_have_text(MARKED)
    expect(busy_of(charge.locator("tr.total"))).to_have_text(MARKED)
    expect(busy_of(charge.locator("tr", has_text="lab-a"))).not_to_have_text(MARKED)
    expect(page.locator("#charge-estimated")).to_be_visible()

    # the page's CSV keeps estimated GPU-hours apart (its last column, as the chargeback's)
    with page.expect_download() as dl:
        page.get_by_role("button", name="Export CSV").click()
    with open(dl.value.path()) as f:
        rows = {(r["group_by"], r["key"]): r for r in csv.DictReader(io.StringIO(f.read()))}
    assert float(rows[("user", "dora")]["gpu_hours_estimated"]) == pytest.approx(5.0)
    assert float(rows[("user", "dora")]["gpu_hours_measured"]) == 0.0
    assert float(rows[("user", "ann")]["gpu_hours_estimated"]) == 0.0
    assert rows[("user", "eve")]["efficiency"] == ""
    shot(page, "usage-estimated")

    # a chargeback with a row unknown and nothing estimated: the note still shows, for the —
    unknown = {"gpu_hours_busy": 0.0, "gpu_hours_measured": 0.0, "gpu_hours_estimated": 0.0}
    measured = {"gpu_hours_busy": 1.0, "gpu_hours_measured": 2.0, "gpu_hours_estimated": 0.0}
    common = {
        "gpu_hours_allocated": 2.0,
        "gpu_memory_gib_hours": 1.0,
        "energy_kwh": None,
        "workloads": 1,
    }
    rep = {
        "by": "user",
        "rows": [{"key": "ann", **common, **measured}, {"key": "eve", **common, **unknown}],
        "total": {"key": "total", **common, **measured, "gpu_hours_allocated": 4.0, "workloads": 2},
    }
    page.route(re.compile(r"/usage/chargeback\?"), lambda route: route.fulfill(json=rep))
    page.locator("#charge-by").select_option("user")
    expect(busy_of(charge.locator("tr", has_text="eve"))).to_have_text("—")
    expect(busy_of(charge.locator("tr", has_text="ann"))).to_have_text("1.00")
    note = page.locator("#charge-estimated")
    expect(note).to_be_visible()
    expect(note).to_contain_text("unknown")
