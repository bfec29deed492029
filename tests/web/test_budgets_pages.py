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
