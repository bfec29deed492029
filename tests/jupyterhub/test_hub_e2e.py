"""End to end: a real gpupool server (the system `gpupool up` builds, the local engine on 2
simulated GPUs), a real JupyterHub with configurable-http-proxy, real notebook servers
(jupyterhub-singleuser + JupyterLab) that the local engine runs as their owners' accounts,
driven through the hub's REST API. The tests share one stack and run in order (each leaves a
known state).
"""

from __future__ import annotations

import os
import pwd
import shutil

import httpx
import psutil
import pytest

from gpupool.engines.local.user_accounts import UserAccounts
from gpupool.server.hub.config import service_secret
from gpupool.server.loops.culler import CullerLoop
from tests.jupyterhub.stack import Stack, build, events, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("configurable-http-proxy") is None,
        reason="configurable-http-proxy missing; scripts/test installs it with npm",
    ),
]
#: A notebook server with JupyterLab takes 10-20 s to come up on a 2-core CI machine.
SPAWN_S = 180


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    st = build(tmp_path_factory.mktemp("hub"))
    for user in ("alice", "bob", "carol", "dave"):
        st.login(user)
    yield st
    st.close()


def _active(stack: Stack, user: str) -> list[dict]:
    return [
        w
        for w in stack.notebooks(user)
        if w["state"] in ("pending", "admitted", "starting", "running")
    ]


def test_login_with_gpupool_credentials_and_admins_follow_gpupool(stack):
    stack.login("root")
    assert stack.hub_api("GET", "/users/root").json()["admin"] is True
    assert stack.hub_api("GET", "/users/alice").json()["admin"] is False
    c = httpx.Client(base_url=stack.hub.public_url, follow_redirects=True)
    page = c.get("/hub/login")
    xsrf = page.text.split('name="_xsrf" value="', 1)[1].split('"', 1)[0]
    r = c.post("/hub/login", data={"username": "alice", "password": "wrong", "_xsrf": xsrf})
    assert r.status_code == 403 and "/hub/login" in str(r.url)
    c.close()


def test_forged_user_options_are_refused_with_a_clear_message(stack):
    r = stack.spawn("alice", {"gpus": 2})
    assert r.status_code == 400
    assert "unknown option 'gpus'" in r.json()["message"]
    r = stack.spawn("alice", {"profile": "other-only"})
    assert r.status_code == 400 and "no profile 'other-only'" in r.json()["message"]
    # a profile the form offers, but beyond lab's per-user cap: gpupool itself refuses it
    r = stack.spawn("alice", {"profile": "pair"})
    assert r.status_code in (400, 422), r.text
    msg = r.json()["message"]
    assert "gpupool refused the notebook" in msg and "at most 1" in msg
    assert _active(stack, "alice") == []
    assert stack.server_model("alice") is None


def _banner(client) -> str:
    """The gpupool notice on the hub's home page ('' for none)."""
    text = client.get("/hub/home").text
    if 'id="gpupool-announcement">' not in text:
        return ""
    return text.split('id="gpupool-announcement">', 1)[1].split("</span>", 1)[0]


def test_two_users_get_different_gpus_the_third_waits_and_starts_by_itself(stack):
    envs = stack.spawn_all_ready(("alice", "bob"), {"profile": "gpu"}, SPAWN_S)
    env_a, env_b = envs["alice"], envs["bob"]
    gpus = {env_a["CUDA_VISIBLE_DEVICES"], env_b["CUDA_VISIBLE_DEVICES"]}
    assert gpus == set(stack.gpu_uuids)
    (wa,) = _active(stack, "alice")
    assert env_a["GPUPOOL_WORKLOAD_ID"] == wa["id"]
    assert wa["allocation"]["gpu_uuids"] == [env_a["CUDA_VISIBLE_DEVICES"]]
    # the local engine runs each notebook as its owner's own account (never root), listening
    # on 127.0.0.1 at the endpoint it reported, which the hub's proxy routes to
    pid_a = stack.notebook_pid("alice")
    uid_a = os.stat(f"/proc/{pid_a}").st_uid
    if os.geteuid() == 0:
        assert pwd.getpwuid(uid_a).pw_name == UserAccounts.default().name("alice")
        assert uid_a != os.stat(f"/proc/{stack.notebook_pid('bob')}").st_uid
    assert uid_a != 0
    assert wa["endpoint"].startswith("http://127.0.0.1:")
    assert env_a["JUPYTERHUB_SERVICE_URL"] == wa["endpoint"] + "/user/alice/"

    # carol waits, and sees where she stands
    assert stack.spawn("carol", {"profile": "gpu"}).status_code == 202
    seen = events(stack, "carol", lambda ev: "in line" in ev.get("message", ""))
    assert seen[-1]["message"].startswith("Queued for a GPU: 1st in line for lab")
    assert seen[-1]["progress"] == 0  # queued: the bar does not move
    (wc,) = _active(stack, "carol")
    assert wc["state"] == "pending" and wc["pending"]["position"] == 1
    # ... on her other hub pages too, while she is queued
    carol = stack.login("carol")
    told = wait_for(lambda: _banner(carol), "the queue banner on carol's page", 30)
    assert told.startswith("Your notebook is queued for a GPU: 1st in line for lab")

    # dave queues behind her, then cancels while queued: his request leaves the queue
    assert stack.spawn("dave", {"profile": "gpu"}).status_code == 202
    seen = events(stack, "dave", lambda ev: "2nd in line" in ev.get("message", ""))
    assert stack.hub_api("DELETE", "/users/dave/server").status_code in (202, 204)
    wait_for(lambda: not stack.server_model("dave"), "dave's spawn to be cancelled", 60)
    wait_for(lambda: not _active(stack, "dave"), "dave's workload to leave the queue", 30)
    assert stack.notebooks("dave")[0]["state"] == "cancelled"
    dave = stack.login("dave")
    wait_for(lambda: not _banner(dave), "the queue banner to leave dave's page", 30)

    # alice stops: her notebook server ends, her GPU goes to carol, whose notebook starts
    # by itself
    assert stack.hub_api("DELETE", "/users/alice/server").status_code in (202, 204)
    wait_for(lambda: not psutil.pid_exists(pid_a), "alice's notebook process to end", 60)
    wait_for(lambda: stack.ready("carol"), "carol's notebook", SPAWN_S, 0.5)
    assert stack.notebook_env("carol")["CUDA_VISIBLE_DEVICES"] == env_a["CUDA_VISIBLE_DEVICES"]
    assert _banner(carol) == ""  # no longer queued
    assert _active(stack, "alice") == []
    assert stack.notebooks("alice")[0]["state"] == "cancelled"


def test_dashboard_single_sign_on_through_the_hub(stack):
    """A user signed in to the hub opens the dashboard from the Services menu and is signed in
    to gpupool as themselves, without a password."""
    c = stack.login("carol")
    r = c.get("/services/gpupool/", headers={"Accept": "text/html"})
    assert r.status_code == 200, r.text[:300]
    assert str(r.url).endswith("/services/gpupool/dashboard/cluster")
    assert any("/hub/api/oauth2/authorize" in str(h.url) for h in r.history)
    me = c.get("/services/gpupool/api/v1/auth/me")
    assert me.status_code == 200 and me.json()["name"] == "carol"
    # the session stays on the service's path: never sent to a notebook server (review F2)
    (session,) = [k for k in c.cookies.jar if k.name == "gpupool_session"]
    assert session.path == "/services/gpupool/"
    assert "gpupool_session" not in c.build_request("GET", "/user/carol/lab").headers.get(
        "cookie", ""
    )
    # the sign-on may read who carol logged in as in gpupool (review F9)
    who = httpx.get(
        stack.hub.public_url + "/hub/api/users/carol",
        headers={"Authorization": f"token {service_secret(stack.hub)}"},
    )
    assert who.status_code == 200 and who.json()["auth_state"]["gpupool_user"] == "carol"
    # changes through the cookie need the session's CSRF token
    api = "/services/gpupool/api/v1"
    assert c.post(api + "/tokens", json={"name": "x"}).status_code == 403
    csrf = {"X-CSRF-Token": c.get(api + "/auth/csrf").json()["token"]}
    assert c.post(api + "/tokens", json={"name": "x"}, headers=csrf).status_code == 201
    # API calls are not redirected, and a forged callback is refused with a message
    anon = httpx.get(stack.hub.public_url + "/services/gpupool/api/v1/auth/me")
    assert anon.status_code == 401
    bad = c.get("/services/gpupool/oauth_callback", params={"code": "x", "state": "y"})
    assert bad.status_code == 400 and "stale" in bad.text


def test_hub_restart_keeps_running_notebooks_and_their_allocations(stack):
    before = {u: stack.notebook_pid(u) for u in ("bob", "carol")}
    allocs = {u: _active(stack, u)[0] for u in ("bob", "carol")}
    # dave's spawn is queued when the hub goes down: it must not come back as a phantom
    # server, nor stay in gpupool's queue
    assert stack.spawn("dave", {"profile": "gpu"}).status_code == 202
    wait_for(lambda: _active(stack, "dave"), "dave's request in the queue", 30)
    stack.stop_hub()
    for pid in before.values():
        os.kill(pid, 0)  # still alive while the hub is down
    stack.start_hub()
    for user, pid in before.items():
        wait_for(lambda u=user: stack.ready(u), f"{user} after the restart", 60)
        assert stack.notebook_pid(user) == pid
        (w,) = _active(stack, user)
        assert w["id"] == allocs[user]["id"]
        assert w["allocation"]["gpu_uuids"] == allocs[user]["allocation"]["gpu_uuids"]
    wait_for(lambda: not stack.server_model("dave"), "dave's orphaned spawn to be cleared", 60)
    wait_for(lambda: not _active(stack, "dave"), "dave's request to leave the queue", 30)
    # and the new proxy routes to them
    r = stack.hub_api("GET", "/users/bob")
    url = stack.hub.public_url + r.json()["servers"][""]["url"] + "api/status"
    resp = wait_for(
        lambda: (
            x
            if (
                x := httpx.get(url, headers={"Authorization": f"token {stack.driver_token}"})
            ).status_code
            == 200
            else None
        ),
        "bob's notebook through the new proxy",
        30,
    )
    assert "started" in resp.json()


def test_gpupool_restart_keeps_notebooks_and_their_allocations(stack):
    """The primary restarts (a new system over the same data dir): its local engine adopts
    the running notebook servers, which keep their endpoints and GPUs."""
    before = {u: (stack.notebook_pid(u), _active(stack, u)[0]) for u in ("bob", "carol")}
    stack.restart_gpupool()
    for user, (pid, w) in before.items():
        os.kill(pid, 0)
        now = wait_for(
            lambda u=user: (a := _active(stack, u)) and a[0]["state"] == "running" and a[0],
            f"{user}'s notebook adopted as running",
            30,
        )
        assert now["id"] == w["id"]
        assert now["allocation"]["gpu_uuids"] == w["allocation"]["gpu_uuids"]
        assert now["endpoint"] == w["endpoint"]
        assert stack.notebook_pid(user) == pid


def test_culling_warns_then_stops_an_idle_gpu_notebook_and_leaves_a_busy_one(stack):
    """The server's culler (real loop, GPU idleness injected) warns bob, whose GPU idles, then
    culls him; carol uses her GPU and is left alone. The hub shows bob the warning, stops his
    notebook and tells him why."""
    assert stack.gpupool("PATCH", "/tenants/lab", json={"idle_timeout_s": 1800}).status_code == 200
    (wb,) = _active(stack, "bob")
    (wc,) = _active(stack, "carol")
    idle = {wb["allocation"]["gpu_uuids"][0]: 1700.0, wc["allocation"]["gpu_uuids"][0]: 0.0}
    culler = CullerLoop(stack.app.state.ctx, lambda a: idle[a.gpu_uuids[0]], warn_before_s=600)

    report = culler.run_once()
    assert report.warned == [wb["id"]] and not report.culled
    bob = stack.login("bob")
    banner = _banner

    warning = wait_for(lambda: banner(bob), "the culling warning on bob's hub page", 30)
    assert "idle for 28 min" in warning and "will be stopped in 2 min" in warning
    assert banner(stack.login("carol")) == ""

    idle[wb["allocation"]["gpu_uuids"][0]] = 1900.0
    report = culler.run_once()
    assert list(report.culled) == [wb["id"]]
    wait_for(lambda: not stack.server_model("bob"), "bob's notebook to be stopped", 60)
    wait_for(lambda: not _active(stack, "bob"), "bob's GPU to be released", 30)
    (ended,) = [w for w in stack.notebooks("bob") if w["id"] == wb["id"]]
    assert ended["state"] == "culled" and "idle for 32 min" in ended["reason"]
    told = wait_for(lambda: "stopped" in (b := banner(bob)) and b, "why, on bob's page", 30)
    assert "idle for 32 min" in told
    # carol, who uses her GPU, is untouched
    assert stack.ready("carol") and _active(stack, "carol")[0]["id"] == wc["id"]
    stack.gpupool("PATCH", "/tenants/lab", json={"clear_idle_timeout": True})


def test_browser_spawn_form_queue_and_start(stack, browser):
    """dave uses the real spawn form in Chromium: live availability, a visible place in the
    queue, and JupyterLab once carol's GPU is released. The Services menu lists gpupool."""
    # both GPUs busy: carol's notebook and a new one of alice
    assert stack.spawn("alice", {"profile": "gpu"}).status_code in (201, 202)
    wait_for(lambda: stack.ready("alice"), "alice's notebook", SPAWN_S, 0.5)
    assert stack.ready("carol")
    ctx = browser.new_context(base_url=stack.hub.public_url)
    try:
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        page.goto("/hub/login")
        page.fill("#username_input", "dave")
        page.fill("#password_input", "hub-test-password-1")
        page.click("#login_submit")
        page.wait_for_url("**/hub/spawn**")
        form = page.locator("#spawn_form")
        assert "One whole GPU" in form.inner_text()
        badge = page.locator("#gpupool-profile-gpu + label .gpupool-availability")
        assert badge.inner_text() == f"0 of 2 {stack.gpu_model} free"
        assert "lab uses 2 of its 2 guaranteed GPUs (limit 2)" in form.inner_text()
        services = page.locator("a.dropdown-item", has_text="gpupool")
        assert services.get_attribute("href") == "/services/gpupool/"
        page.check("#gpupool-profile-gpu")
        page.click("#spawn_form button[type=submit]")
        page.wait_for_url("**/spawn-pending/dave**")
        msg = page.locator("#progress-message")
        msg.filter(has_text="1st in line for lab").wait_for()
        # carol stops; dave's notebook starts by itself and the page moves on to it
        stack.hub_api("DELETE", "/users/carol/server")
        page.wait_for_url("**/user/dave/**", timeout=SPAWN_S * 1000)
        assert stack.ready("dave")
    finally:
        ctx.close()
