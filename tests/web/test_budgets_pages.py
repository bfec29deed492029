"""The dashboard's chargeback table and download (usage page) and its budgets and
reservations (tenants page), in a real browser against a real server (issue 35)."""

from __future__ import annotations

import csv
import io
import time

import pytest

from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod
from gpupool.domain.reservations import Reservation
from gpupool.store import BudgetRepo, ChargebackRepo, ReservationRepo
from tests.web.conftest import login, shot

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


def test_chargeback_table_and_csv_match_the_accounting(page, live):
    login(page, "root", next_page="usage")
    table = page.locator("#chargeback tbody")
    expect(table.locator("tr.total")).to_contain_text("total")
    expect(table).to_contain_text("n/a")
    page.locator("#charge-by").select_option("user")
    expect(page.locator("#charge-key")).to_have_text("User")
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download chargeback CSV").click()
    with open(dl.value.path()) as f:
        rows = list(csv.DictReader(io.StringIO(f.read())))
    total = rows[-1]
    assert total["user"] == "total" and total["energy_kwh"] == "n/a"
    store = live.app.state.ctx.store
    day = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
    with store.read() as s:
        got = ChargebackRepo(s).report("user", from_day=day)
    want = sum(r.gpu_seconds_allocated for r in got) / 3600
    assert float(total["gpu_hours_allocated"]) == pytest.approx(want, abs=1e-6)
    shot(page, "usage-chargeback")


def test_the_dashboards_own_csv_neutralises_formulas(page, live):
    """The usage page's client-side CSV (GP.csvText, behind GP.downloadCsv) follows the
    server's rule (gpupool.api.csvtext): text starting a formula gets a leading quote."""
    login(page, "root", next_page="usage")
    cells = ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "a,b", 'say "hi"', "ok-", "line\nx"]
    text = page.evaluate("(cells) => GP.csvText([[...cells, 3, -1.5, null]])", cells)
    (row,) = list(csv.reader(io.StringIO(text, newline="")))
    assert row == [
        "'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "a,b", 'say "hi"', "ok-", "line\nx",
        "3", "-1.5", "",
    ]  # fmt: skip


def test_tenants_page_lists_budgets_and_reservations(page, live):
    store = live.app.state.ctx.store
    now = time.time()
    with store.write() as s:
        BudgetRepo(s).put(Budget("bio", BudgetPeriod.MONTH, 0.5, BudgetMode.HOLD))
        ReservationRepo(s).add(
            Reservation("r-web", "physics/lab-a", 2, now + 3600, now + 7200, name="ml101"), now
        )
    login(page, "root", next_page="tenants")
    expect(page.locator("#reservations tbody")).to_contain_text("ml101")
    expect(page.locator("#reservations tbody")).to_contain_text("upcoming")
    budgets = page.locator("#budgets tbody")
    expect(budgets).to_contain_text("bio")
    expect(budgets).to_contain_text("hold")
    shot(page, "tenants-budgets-reservations")


def _calendar_geometry(page, rid: str) -> tuple[float, float, float, float]:
    """(from, to) of the calendar's range, and a bar's left and right edge as fractions of
    its track's width, measured from the rendered boxes."""
    rng = page.locator("#res-calendar")
    frm, to = float(rng.get_attribute("data-from")), float(rng.get_attribute("data-to"))
    bar = page.locator(f'.cal-bar[data-id="{rid}"]')
    track = bar.locator("xpath=..").bounding_box()
    box = bar.bounding_box()
    assert track and box
    left = (box["x"] - track["x"]) / track["width"]
    return frm, to, left, (box["x"] + box["width"] - track["x"]) / track["width"]


def test_reservations_calendar_places_bars_and_keeps_to_the_readers_tenants(page, live):
    store = live.app.state.ctx.store
    day = 86400.0
    today = time.time() // day * day
    a = ("r-cal-a", "physics/lab-a", 2, today + 2 * day + 6 * 3600, today + 3 * day + 6 * 3600)
    b = ("r-cal-b", "physics/lab-b", 1, today + 5 * day, today + 6 * day + 12 * 3600)
    now = time.time()
    with store.write() as s:
        for rid, tenant, gpus, start, end in (a, b):
            ReservationRepo(s).add(
                Reservation(rid, tenant, gpus, start, end, model="A100", name=rid), now
            )
        # over already (earlier today): drawn, greyed
        ReservationRepo(s).add(
            Reservation("r-cal-over", "bio", 1, today, today + (now - today) / 2, model="V100"),
            now,
        )
    login(page, "root", next_page="tenants")
    cal = page.locator("#res-calendar")
    bar_a = cal.locator('.cal-bar[data-id="r-cal-a"]')
    expect(bar_a).to_have_text("physics/lab-a · 2 GPUs")
    expect(cal.locator('.cal-bar[data-id="r-cal-b"]')).to_have_text("physics/lab-b · 1 GPU")
    expect(cal.locator('.cal-row[data-model="A100"] .cal-now')).to_have_count(1)
    for rid, _t, _g, start, end in (a, b):
        frm, to, left, right = _calendar_geometry(page, rid)
        assert (frm, to) == (today, today + 14 * day)  # 14 UTC days from today by default
        assert left == pytest.approx((start - frm) / (to - frm), abs=0.003)
        assert right == pytest.approx((end - frm) / (to - frm), abs=0.003)
    # both on one row (same model), in one lane: they do not overlap
    box_a, box_b = (
        cal.locator(f'.cal-bar[data-id="{r}"]').bounding_box() for r in ("r-cal-a", "r-cal-b")
    )
    assert box_a and box_b and box_a["y"] == box_b["y"]
    expect(cal.locator('.cal-bar[data-id="r-cal-over"]')).to_have_class("cal-bar past")
    expect(bar_a).to_have_class("cal-bar ")
    shot(page, "tenants-reservations-calendar")
    # the day view: neither falls on today; "Later" twice reaches A's day, partly
    page.get_by_label("Calendar span").select_option("1")
    expect(bar_a).to_have_count(0)
    page.get_by_role("button", name="Later").click()
    page.get_by_role("button", name="Later").click()
    expect(bar_a).to_be_visible()
    frm, to, left, right = _calendar_geometry(page, "r-cal-a")
    assert (frm, to) == (today + 2 * day, today + 3 * day)
    assert left == pytest.approx(0.25, abs=0.003) and right == pytest.approx(1.0, abs=0.003)
    expect(cal.locator(".cal-now")).to_have_count(0)


def test_reservations_calendar_shows_a_member_only_their_tenants(page, live):
    store = live.app.state.ctx.store
    now = time.time()
    with store.write() as s:
        ReservationRepo(s).add(
            Reservation("r-cal-bio", "bio", 1, now + 3600, now + 7200, name="biocourse"), now
        )
        ReservationRepo(s).add(
            Reservation("r-cal-lab", "physics/lab-a", 1, now + 3600, now + 7200, name="labwork"),
            now,
        )
    login(page, "cara", next_page="tenants")  # a member of bio only
    cal = page.locator("#res-calendar")
    expect(cal.locator('.cal-bar[data-id="r-cal-bio"]')).to_have_text("bio · 1 GPU")
    expect(cal.locator('.cal-bar[data-id="r-cal-lab"]')).to_have_count(0)
    expect(cal).not_to_contain_text("physics")  # nor any other test's physics bookings
    assert all(t.startswith("bio · ") for t in cal.locator(".cal-bar").all_inner_texts())
    expect(cal.locator('.cal-row[data-model=""] .cal-label')).to_have_text("any model")
