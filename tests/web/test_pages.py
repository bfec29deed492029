"""The dashboard in a real browser (Debian's Chromium via Playwright) against a real server:
every page for the roles that matter, edits, submits, cancels and forbidden actions."""

from __future__ import annotations

import csv
import io

import pytest

from tests.web.conftest import login, shot

pytestmark = pytest.mark.slow

expect = pytest.importorskip("playwright.sync_api").expect


def test_unauthenticated_page_goes_to_login_and_bad_password_is_explained(page):
    page.goto("/dashboard/queue")
    page.wait_for_url("**/dashboard/login?next=*")
    page.get_by_label("User name").fill("ann")
    page.get_by_label("Password").fill("wrong-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_contain_text("Wrong user name or password")
    page.get_by_role("button", name="Log in").click()  # still on the form, token not stored
    assert page.evaluate("sessionStorage.getItem('gpupool.token')") is None
    shot(page, "login-error")


def test_cluster_tiles_for_admin_update_live(page, live):
    login(page, "root")
    tiles = page.locator("li.gpu")
    expect(tiles).to_have_count(8)
    first = tiles.first
    expect(first).to_contain_text("H100-80GB")
    expect(first).to_contain_text("simulated")
    expect(page.locator("#summary")).to_contain_text("GPUs")
    # A running workload's holder, share and enforcement are on its GPU's tile.
    expect(page.locator("li.gpu .holders").first).to_contain_text("enforced:")
    # Every fifth GPU is held but idle in the seeded telemetry.
    expect(page.locator("li.gpu.idle")).not_to_have_count(0)
    # Live: new telemetry shows up without reloading the page.
    live.seeded.sources[0].set_utilization(0, 12.0)
    live.seeded.samplers[0].sample_once()
    expect(first.locator("dd").nth(1)).to_contain_text("12%", timeout=15_000)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    shot(page, "cluster-admin")


def test_cluster_is_keyboard_navigable(page):
    login(page, "ann")
    page.keyboard.press("Tab")
    expect(page.locator(".skip")).to_be_focused()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.className")
    assert "gpu" in focused or page.evaluate("document.activeElement.tagName") in ("A", "BUTTON")


@pytest.mark.parametrize(
    ("user", "sees", "hidden"),
    [
        ("root", ["ann", "bob", "cara"], []),
        ("ann", ["ann"], ["cara"]),
        ("tess", ["ann", "bob"], ["cara"]),
    ],
)
def test_queue_shows_what_the_role_may_see(page, user, sees, hidden):
    login(page, user, next_page="queue")
    pending = page.locator("#pending tbody")
    expect(pending.locator("tr").first).not_to_have_class("empty")
    expect(pending).to_contain_text("is at its limit")
    for name in sees:
        expect(pending).to_contain_text(name)
    for name in hidden:
        expect(pending).not_to_contain_text(name)
    expect(page.locator("#running tbody tr").first).not_to_have_class("empty")
    shot(page, f"queue-{user}")


def test_usage_charts_efficiency_and_csv(page):
    login(page, "root", next_page="usage")
    for chart in ("chart-util", "chart-mem", "chart-tenant", "chart-user"):
        expect(page.locator(f"#{chart} .main-svg").first).to_be_attached()
    eff = page.locator("#efficiency tbody")
    for name in ("ann", "bob", "cara"):
        expect(eff).to_contain_text(name)
    expect(eff.locator("tr").first).to_contain_text("cara")  # least efficient first (15%)
    page.get_by_role("button", name="1 h").click()
    expect(page.get_by_role("button", name="1 h")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#chart-util .main-svg").first).to_be_attached()
    with page.expect_download() as dl:
        page.get_by_role("button", name="Export CSV").click()
    with open(dl.value.path()) as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    assert rows[0][:2] == ["group_by", "key"]
    assert {r[1] for r in rows[1:] if r[0] == "user"} >= {"ann", "bob", "cara"}
    shot(page, "usage-admin")


def test_usage_for_member_is_limited_to_its_tenant(page):
    login(page, "ann", next_page="usage")
    eff = page.locator("#efficiency tbody")
    expect(eff).to_contain_text("ann")
    expect(eff).not_to_contain_text("cara")


def test_admin_edits_a_quota_with_validation(page):
    login(page, "root", next_page="tenants")
    row = page.locator("tr[data-tenant='physics/lab-b']")
    row.get_by_role("button", name="Edit").click()
    ed = page.locator("#quota-editor")
    # Client-side check: limit below guarantee.
    ed.get_by_label("Guaranteed GPUs").fill("3")
    ed.get_by_label("Limit GPUs").fill("2")
    ed.get_by_role("button", name="Save quota").click()
    expect(page.locator("#q-limit-err")).to_contain_text("below the guarantee")
    # Server-side check: the children's guarantees would exceed physics' limit of 12.
    ed.get_by_label("Guaranteed GPUs").fill("10")
    ed.get_by_label("Limit GPUs").fill("11")
    ed.get_by_role("button", name="Save quota").click()
    expect(page.locator("#quota-error")).to_contain_text("physics")
    shot(page, "tenants-error")
    # A valid edit is saved and shown.
    ed.get_by_label("Guaranteed GPUs").fill("2.5")
    ed.get_by_label("Limit GPUs").fill("5")
    ed.get_by_role("button", name="Save quota").click()
    expect(page.locator("#flash")).to_contain_text("Saved the quota of physics/lab-b")
    expect(row.locator("td").first).to_have_text("2.5")
    shot(page, "tenants-admin")


def test_tenant_admin_edits_child_but_member_cannot_edit(page):
    login(page, "tess", next_page="tenants")
    expect(page.locator("tr[data-tenant='physics/lab-a'] button")).to_have_count(1)
    expect(page.locator("tr[data-tenant='physics'] button")).to_have_count(0)
    expect(page.locator("tr[data-tenant='bio']")).to_have_count(0)
    page.locator("tr[data-tenant='physics/lab-a']").get_by_role("button", name="Edit").click()
    page.get_by_label("Weight").fill("2")
    page.get_by_role("button", name="Save quota").click()
    expect(page.locator("#flash")).to_contain_text("Saved the quota of physics/lab-a")


def test_member_sees_no_edit_buttons(page):
    login(page, "ann", next_page="tenants")
    expect(page.locator("#tenants tbody tr").first).not_to_have_class("empty")
    expect(page.locator("#tenants tbody button")).to_have_count(0)
    shot(page, "tenants-member")


def test_member_submits_cancels_and_reads_logs(page):
    login(page, "ann", next_page="workloads")
    page.get_by_label("Command").fill("python train.py --epochs 3")
    page.get_by_label("Whole GPUs").fill("1")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#flash")).to_contain_text("Submitted w-")
    wid = page.locator("#flash").inner_text().split()[1].rstrip(".")
    row = page.locator(f"tr[data-id='{wid}']")
    expect(row).to_contain_text("pending")
    row.get_by_role("button", name="Logs").click()
    expect(page.locator("#logs")).not_to_be_empty()
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name=f"Cancel {wid}").click()
    expect(page.locator("#flash")).to_contain_text(f"Cancelled {wid}")
    page.get_by_label("Show finished").check()
    expect(page.locator(f"tr[data-id='{wid}']")).to_contain_text("cancelled")
    shot(page, "workloads-member")


def test_member_starts_a_notebook_from_a_profile(page):
    login(page, "ann", next_page="workloads")
    page.get_by_label("quarter").check()
    page.get_by_role("button", name="Start notebook").click()
    expect(page.locator("#flash")).to_contain_text("Started notebook w-")
    expect(page.locator("#mine tbody")).to_contain_text("notebook")


def test_bad_job_input_is_explained_before_sending(page):
    login(page, "ann", next_page="workloads")
    page.get_by_label("Command").fill("")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#j-command-err")).to_contain_text("enter the command")
    page.get_by_label("Command").fill("echo 'unclosed")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#j-command-err")).to_contain_text("unclosed")
    page.get_by_label("Command").fill("echo hi")
    page.get_by_label("or a fraction of one GPU").fill("1.5")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#j-fraction-err")).to_contain_text("below 1")


def test_server_refusal_is_explained(page):
    """A request no node can hold is refused by the API; the form says why."""
    login(page, "ann", next_page="workloads")
    page.get_by_label("Command").fill("python big.py")
    page.get_by_label("Whole GPUs").fill("64")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#job-error")).to_contain_text("Could not submit this job")


def test_viewer_submit_is_forbidden_with_a_clear_message(page):
    login(page, "vic", next_page="workloads")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#job-error")).to_contain_text("Not allowed: you cannot submit this job")
    shot(page, "workloads-viewer-forbidden")


def test_admin_page_for_admin(page):
    login(page, "root", next_page="admin")
    expect(page.get_by_role("link", name="Admin")).to_be_visible()
    users = page.locator("#users-table tbody")
    for name in ("root", "tess", "ann", "bob", "vic", "cara"):
        expect(users).to_contain_text(name)
    expect(page.locator("#gpus-table tbody tr")).to_have_count(8)
    expect(page.locator("#profiles-table tbody")).to_contain_text("quarter")
    expect(page.locator("#events-table tbody tr").first).not_to_have_class("empty")
    # Change a GPU's sharing mode.
    gpu_row = page.locator("#gpus-table tbody tr").first
    gpu_row.get_by_role("combobox").select_option("shared")
    gpu_row.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_contain_text("is now shared")
    # Create a token: shown once.
    page.get_by_label("Token name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator("#token-new")).to_contain_text("shown once")
    # Add a membership.
    page.locator("#m-user").select_option("cara")
    page.locator("#m-tenant").select_option("physics/lab-b")
    page.get_by_role("button", name="Add membership").click()
    expect(page.locator("#flash")).to_contain_text("cara is now member of physics/lab-b")
    shot(page, "admin-admin")


def test_admin_page_forbidden_for_member(page):
    login(page, "ann", next_page="admin")
    expect(page.get_by_role("link", name="Admin")).to_be_hidden()
    expect(page.locator("#flash")).to_contain_text("Not allowed")
    for hidden in ("#users", "#gpus", "#profiles", "#events"):
        expect(page.locator(hidden)).to_be_hidden()
    expect(page.locator("#tokens-table tbody")).to_contain_text("ann")
    shot(page, "admin-member-forbidden")


def test_admin_page_for_tenant_admin_shows_members_and_refuses_other_tenants(page):
    login(page, "tess", next_page="admin")
    expect(page.locator("#flash")).to_contain_text("tenant-admin")
    expect(page.locator("#users-table tbody")).to_contain_text("ann")
    expect(page.locator("#gpus")).to_be_hidden()
    page.locator("#m-user").select_option("bob")
    page.locator("#m-tenant").select_option("physics/lab-a")
    page.get_by_role("button", name="Add membership").click()
    expect(page.locator("#flash")).to_contain_text("bob is now member of physics/lab-a")
    shot(page, "admin-tenant-admin")


def test_admin_creates_a_tenant_and_sees_why_one_is_refused(page):
    login(page, "root", next_page="tenants")
    form = page.locator("#tenant-creator")
    # bio holds workloads, so it cannot get a sub-tenant: the API says why.
    form.get_by_label("Path").fill("bio/new-lab")
    form.get_by_role("button", name="Create tenant").click()
    expect(page.locator("#tenant-error")).to_contain_text("Could not create tenant bio/new-lab")
    expect(page.locator("#tenant-error")).to_contain_text("workloads")
    form.get_by_label("Path").fill("chem")
    form.get_by_label("Guaranteed GPUs").fill("1")
    form.get_by_label("Limit GPUs").fill("2")
    form.get_by_role("button", name="Create tenant").click()
    expect(page.locator("#flash")).to_contain_text("Created tenant chem")
    expect(page.locator("tr[data-tenant='chem']")).to_contain_text("2")


def test_admin_defines_and_deletes_a_profile(page):
    login(page, "root", next_page="admin")
    form = page.locator("#profile-form")
    form.get_by_label("Profile name").fill("half")
    form.get_by_label("GPU fraction").fill("0.5")
    form.get_by_label("GPU memory, GiB").fill("40")
    form.get_by_label("Description").fill("Half a GPU, 40 GiB")
    form.get_by_role("button", name="Add profile").click()
    expect(page.locator("#flash")).to_contain_text("Added profile half")
    row = page.locator("#profiles-table tr[data-profile='half']")
    expect(row).to_contain_text("0.5")
    # Bad input is refused by the API with a reason next to the form.
    form.get_by_label("Profile name").fill("bad name!")
    form.get_by_role("button", name="Add profile").click()
    expect(page.locator("#profile-error")).to_contain_text("Could not add profile")
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Delete profile half").click()
    expect(page.locator("#flash")).to_contain_text("Deleted profile half")
    expect(row).to_have_count(0)


def test_workload_link_from_the_queue_lands_on_its_row(page):
    login(page, "ann", next_page="queue")
    link = page.locator("#running tbody a").first
    wid = link.inner_text()
    link.click()
    page.wait_for_url(f"**/dashboard/workloads#{wid}")
    expect(page.locator(f"tr[id='{wid}']")).to_be_focused()
    expect(page.locator(f"tr[id='{wid}']")).to_have_class("target")


PAGE_READY = {
    "cluster": "li.gpu",
    "queue": "#pending tbody tr",
    "usage": "#efficiency tbody tr",
    "tenants": "#tenants tbody tr",
    "workloads": "#mine tbody tr",
    "admin": "#tokens-table tbody tr",
}


@pytest.mark.parametrize("user", ["root", "tess", "ann", "vic"])
def test_every_page_loads_for_every_role(page, user):
    """Each page draws its data (or, for the Admin page, a clear refusal) for each role, with
    no JavaScript error (the `page` fixture checks) and no failed live update."""
    login(page, user)
    for slug, ready in PAGE_READY.items():
        page.goto(f"/dashboard/{slug}")
        page.locator(ready).first.wait_for(state="attached")
        flash = page.locator("#flash")
        if slug == "admin" and user != "root":
            expect(flash).to_contain_text("Not allowed")
        else:
            expect(page.locator("#flash.ok, #flash[hidden]")).to_have_count(1)
        shot(page, f"role-{user}-{slug}")
