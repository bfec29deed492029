"""Dashboard polish (issue 30, item 11), in Chromium where the user sees it: a young server's
usage charts span its age, the tenants page marks borrowing and shows pending work, ids,
tenants and asks stay on one line (the asks in the CLI's short form), times are 24-hour UTC,
the audit card is drawn at load, a favicon is served, and every page fits 800 px."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.web.conftest import login, shot

UTC_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
WINDOW_STEP_S = 600  # gpupool.web.page_data.WINDOW_STEP_S


def test_chart_window_is_the_servers_age_when_it_is_younger_than_the_range():
    from gpupool.web.page_data import WINDOW_STEP_S as step
    from gpupool.web.page_data import chart_window

    assert step == WINDOW_STEP_S
    now = 1_780_000_000.0
    assert chart_window(now, 86400, None) == 86400  # no telemetry yet: the range
    assert chart_window(now, 86400, now - 90000) == 86400  # older than the range
    assert chart_window(now, 86400, now - 7232) == 7800  # 2 h 0.5 min -> 2 h 10 min
    assert chart_window(now, 86400, now - 5) == WINDOW_STEP_S  # at least 10 min
    assert chart_window(now, 3600, now - 7232) == 3600


def test_usage_charts_of_a_young_server_span_its_age(page):
    """The seeded server has 2 h of telemetry: its 24 h view spans those 2 h (was a 24 h axis
    with a sliver of data at its right end)."""
    login(page, "ann", next_page="usage")
    note = page.locator("#range-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("less than 24 h ago: the charts show the 2 h 10 min since")
    hist = page.evaluate("GP.get('/dashboard/gpu-history?range_s=86400')")
    assert hist["asked_range_s"] == 86400 and hist["range_s"] == 7800
    assert hist["covered_from"] - hist["from"] < WINDOW_STEP_S  # the data fills the chart
    page.locator("#chart-mem .main-svg").first.wait_for()
    shot(page, "usage-young-server")
    # 1 h: the server is older than that, the whole hour is drawn and nothing is said
    page.get_by_role("button", name="1 h").click()
    expect(note).to_be_hidden()


def test_tenants_page_marks_borrowing_and_shows_pending_work(page):
    login(page, "root", next_page="tenants")
    row = page.locator("#tenants tr[data-tenant='physics/lab-b']")
    # lab-b holds 2.5 GPUs on a guarantee of 2: it borrows 0.5
    expect(row.locator(".badge.borrowing")).to_have_text("borrowing 0.5")
    cells = row.locator("td")
    headers = page.locator("#tenants thead th").all_inner_texts()
    col = {name: i - 1 for i, name in enumerate(headers)}  # the first column is a th
    expect(cells.nth(col["Running"])).to_have_text("3")
    expect(cells.nth(col["Pending"])).to_have_text("3 (5 GPUs)")
    # within its guarantee: no mark
    lab_a = page.locator("#tenants tr[data-tenant='physics/lab-a']")
    expect(lab_a.locator(".badge.borrowing")).to_have_count(0)
    shot(page, "tenants-borrowing")


def _lines(page, selector: str) -> list[int]:
    """For each element matching `selector`: how many lines its text takes."""
    return page.eval_on_selector_all(
        selector,
        """els => els.map(el => {
            const r = document.createRange(); r.selectNodeContents(el);
            return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size;
        })""",
    )


def test_ids_tenants_and_asks_stay_on_one_line_at_800_px(page):
    page.set_viewport_size({"width": 800, "height": 900})
    login(page, "root", next_page="queue")
    page.locator("#pending tbody tr").first.wait_for()
    for col in (2, 4, 5):  # Workload, Tenant, Asks for
        lines = _lines(page, f"#pending tbody tr td:nth-child({col})")
        assert lines and all(n == 1 for n in lines), (col, lines)
    asks = page.locator("#pending tbody tr td:nth-child(5)").all_inner_texts()
    assert set(asks) <= {"1 GPU", "2 GPUs", "0.25 GPU, 20G", "0.5 GPU, 20G"}, asks
    lines = _lines(page, "#running tbody tr td:nth-child(1)")
    assert lines and all(n == 1 for n in lines)
    # the page still fits 800 px: wide tables scroll inside their own box
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    shot(page, "queue-800px")


@pytest.mark.parametrize("slug", ["cluster", "usage", "tenants", "workloads", "admin"])
def test_every_page_fits_800_px(page, slug):
    page.set_viewport_size({"width": 800, "height": 900})
    login(page, "root", next_page=slug)
    page.wait_for_load_state("networkidle")
    assert page.evaluate("document.documentElement.scrollWidth") <= 800


def test_times_are_24_hour_utc_everywhere(page):
    login(page, "root", next_page="admin")
    whens = page.locator("#events-table tbody tr td:nth-child(1)")
    whens.first.wait_for()
    texts = whens.all_inner_texts()
    assert texts and all(UTC_TIME.match(t) for t in texts), texts[:3]
    page.goto("/dashboard/queue")
    expect(page.locator("#updated")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d UTC$"))


def test_the_audit_card_is_drawn_at_load(page):
    """It was drawn only once scrolled to (content-visibility: auto): a blank box until then,
    in full-page screenshots too."""
    login(page, "root", next_page="admin")
    page.locator("#events-table tbody tr").first.wait_for()
    style = page.eval_on_selector("#events", "el => getComputedStyle(el).contentVisibility")
    assert style != "auto"
    shot(page, "admin-audit-at-load")


def test_a_favicon_is_linked_and_served(page, live):
    login(page, "ann", next_page="cluster")
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href and page.request.get(href).ok
    ico = page.request.get(f"{live.url}/favicon.ico")
    assert ico.status == 200 and ico.headers["content-type"] == "image/svg+xml"
