"""The REST API end to end over a real database: auth, workloads through the scheduler loop
and the fake executor, tenants, GPUs, usage, events, profiles, metrics."""

from __future__ import annotations

import gpupool
from gpupool.store import UsageRepo
from tests.server.conftest import API, PASSWORD


def test_openapi_is_published(world):
    r = world.client.get(API + "/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert "/api/v1/workloads" in paths and "/api/v1/queue" in paths


def test_login_gives_a_token_that_works_and_can_be_revoked(world):
    r = world.client.post(API + "/auth/login", json={"username": "ann", "password": PASSWORD})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert token.startswith("gp_")
    h = {"Authorization": f"Bearer {token}"}
    me = world.client.get(API + "/auth/me", headers=h).json()
    assert me["name"] == "ann" and me["memberships"][0]["role"] == "member"
    assert world.client.post(API + "/auth/logout", headers=h).status_code == 200
    r = world.client.get(API + "/auth/me", headers=h)
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert "log in again" in r.json()["detail"]


def test_login_sets_a_session_cookie_the_api_accepts(world):
    c = world.client
    r = c.post(API + "/auth/login", json={"username": "vic", "password": PASSWORD})
    assert r.status_code == 200
    assert c.get(API + "/auth/me").json()["name"] == "vic"  # cookie only
    c.cookies.clear()
    assert c.get(API + "/auth/me").status_code == 401


def test_wrong_password_and_expired_tokens_are_refused(world):
    r = world.client.post(API + "/auth/login", json={"username": "ann", "password": "nope-nope"})
    assert r.status_code == 401 and r.json()["detail"] == "wrong user name or password"
    r = world.client.post(API + "/auth/login", json={"username": "ghost", "password": "x" * 9})
    assert r.status_code == 401
    t = world.post("member", "/tokens", json={"name": "ci", "expires_in_s": 60})
    assert t.status_code == 201
    secret = t.json()["token"]
    listed = world.get("member", "/tokens").json()
    assert all("token" not in x for x in listed)  # shown once, never listed
    assert any(x["name"] == "ci" for x in listed)
    world.clock.advance(61)
    r = world.client.get(API + "/auth/me", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401 and "expired" in r.json()["detail"]


def test_submit_queue_admit_run_finish(world):
    w = world.submit(gpus=1, name="train")
    assert w["state"] == "pending" and w["tenant"] == "lab" and w["owner"] == "ann"
    q = world.get("member", "/queue").json()
    assert [e["workload"]["id"] for e in q] == [w["id"]]
    report = world.scheduler.run_once()
    assert report.admitted == [w["id"]]
    got = world.get("member", f"/workloads/{w['id']}").json()
    assert got["state"] == "running"
    assert got["allocation"]["gpu_uuids"][0].startswith("GPU-n1-")
    kinds = [e["kind"] for e in got["events"]]
    assert kinds[0] == "workload.submitted" and "workload.admitted" in kinds
    proc = world.executor.process(w["id"])
    assert proc.env["CUDA_VISIBLE_DEVICES"] == got["allocation"]["gpu_uuids"][0]
    world.executor.write_log(w["id"], "epoch 1\nepoch 2\n")
    logs = world.get("member", f"/workloads/{w['id']}/logs", params={"tail": 1}).json()
    assert logs["text"] == "epoch 2\n"
    # GPUs show their holder
    gpu = world.get("viewer", f"/gpus/{got['allocation']['gpu_uuids'][0]}").json()
    assert gpu["holders"][0]["workload_id"] == w["id"] and gpu["allocated_milli"] == 1000


def test_queue_shows_why_pending_when_the_tenant_is_at_its_limit(world):
    a = world.submit(gpus=3)
    b = world.submit(gpus=1)
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{a['id']}").json()["state"] == "running"
    q = world.get("member", "/queue").json()
    assert [e["workload"]["id"] for e in q] == [b["id"]]
    assert q[0]["position"] == 1 and "limit" in q[0]["reason"]
    one = world.get("member", f"/workloads/{b['id']}").json()
    assert one["pending"]["reason"] == q[0]["reason"]
    # cancelling the big one frees the GPUs; the next cycle admits the small one
    r = world.delete("member", f"/workloads/{a['id']}")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{b['id']}").json()["state"] == "running"


def test_cancel_pending_and_twice(world):
    w = world.submit(gpus=1)
    assert world.delete("member", f"/workloads/{w['id']}").json()["state"] == "cancelled"
    r = world.delete("member", f"/workloads/{w['id']}")
    assert r.status_code == 409 and "already ended" in r.json()["detail"]


def test_list_filters(world):
    a = world.submit(gpus=1)
    b = world.submit(role="outsider", gpus=1)
    world.submit(role="tenant-admin", kind="notebook", command=[])
    ids = [x["id"] for x in world.get("admin", "/workloads", params={"user": "otto"}).json()]
    assert ids == [b["id"]]
    # a member sees its tenant, not the other one
    mine = [x["id"] for x in world.get("member", "/workloads").json()]
    assert a["id"] in mine and b["id"] not in mine
    nb = world.get("member", "/workloads", params={"kind": "notebook"}).json()
    assert [x["owner"] for x in nb] == ["tina"]
    pend = world.get("admin", "/workloads", params=[("state", "pending"), ("state", "running")])
    assert len(pend.json()) == 3
    r = world.get("member", "/workloads", params={"state": "sleeping"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "query.state.0"


def test_fractional_request_lands_on_the_shared_gpu(world):
    w = world.submit(gpu_fraction=0.25, gpu_memory_mib=20480)
    world.scheduler.run_once()
    got = world.get("member", f"/workloads/{w['id']}").json()
    share = got["allocation"]["shares"][0]
    assert share["gpu_uuid"] == "GPU-n1-3" and share["milli"] == 250
    assert share["memory_mib"] == 20480


def test_tenants_tree_quota_and_subtenants(world):
    r = world.post("admin", "/tenants", json={"name": "physics", "quota": {"limit": 4}})
    assert r.status_code == 201, r.text
    r = world.post("tenant-admin", "/tenants", json={"name": "lab/sub"})
    assert r.status_code == 201  # tina manages lab, so she may create below it
    r = world.patch("tenant-admin", "/tenants/lab", json={"quota": {"guaranteed": 10, "limit": 10}})
    assert r.status_code == 403  # but not raise her own quota
    r = world.patch("admin", "/tenants/lab", json={"quota": {"guaranteed": 2, "limit": 1}})
    assert r.status_code == 422 and "below guaranteed" in r.json()["detail"]
    lab = world.get("viewer", "/tenants/lab").json()
    assert lab["quota"]["limit"] == 3 and lab["children"] == ["lab/sub"]
    names = [t["name"] for t in world.get("member", "/tenants").json()]
    assert "lab" in names and "other" not in names and "lab/sub" in names
    assert world.delete("admin", "/tenants/physics").status_code == 204


def test_admin_sets_gpu_sharing_mode(world):
    r = world.patch("admin", "/gpus/GPU-n1-0", json={"sharing": "shared"})
    assert r.status_code == 200 and r.json()["sharing"] == "shared"
    r = world.patch("admin", "/gpus/GPU-n1-0", json={"sharing": "sliced"})
    assert r.status_code == 422
    r = world.patch("tenant-admin", "/gpus/GPU-n1-0", json={"sharing": "exclusive"})
    assert r.status_code == 403 and "admin" in r.json()["detail"]


def test_users_and_memberships(world):
    r = world.post("admin", "/users", json={"name": "newbie", "password": "long enough pw"})
    assert r.status_code == 201
    r = world.put("tenant-admin", "/users/newbie/memberships/lab", json={"role": "member"})
    assert r.status_code == 200 and r.json()["memberships"][0]["tenant"] == "lab"
    r = world.put("tenant-admin", "/users/newbie/memberships/other", json={"role": "member"})
    assert r.status_code == 404  # a tenant she may not see: as if it did not exist (F10)
    names = [u["name"] for u in world.get("tenant-admin", "/users").json()]
    assert "newbie" in names and "otto" not in names
    r = world.client.post(
        API + "/auth/login", json={"username": "newbie", "password": "long enough pw"}
    )
    assert r.status_code == 200
    r = world.patch(
        "member", "/users/ann", json={"password": "another long one", "current_password": PASSWORD}
    )
    assert r.status_code == 200
    r = world.patch("member", "/users/ann", json={"admin": True})
    assert r.status_code == 403


def test_usage_and_events(world):
    with world.ctx.store.write() as s:
        UsageRepo(s).add(
            workload_id="w-x",
            tenant="lab",
            user="ann",
            day="2026-05-01",
            gpu_seconds_allocated=7200,
            gpu_seconds_busy=3600,
        )
        UsageRepo(s).add(
            workload_id="w-y",
            tenant="other",
            user="otto",
            day="2026-05-02",
            gpu_seconds_allocated=3600,
        )
    r = world.get("member", "/usage", params={"group_by": "user"}).json()
    assert [(x["key"], x["gpu_hours_allocated"], x["efficiency"]) for x in r["rows"]] == [
        ("ann", 2.0, 0.5)
    ]
    r = world.get("admin", "/usage", params={"group_by": "day", "from": "2026-05-02"}).json()
    assert [x["key"] for x in r["rows"]] == ["2026-05-02"] and r["from"] == "2026-05-02"
    r = world.get("admin", "/usage", params={"from": "May 1st"})
    assert r.status_code == 422 and "date like" in r.json()["detail"]
    w = world.submit(gpus=1)
    ev = world.get("member", "/events", params={"workload": w["id"]}).json()
    assert ev[0]["kind"] == "workload.submitted"
    assert world.get("outsider", "/events", params={"workload": w["id"]}).json() == []


def test_profiles_submit_through_a_profile(world):
    body = {
        "name": "quarter",
        "gpu_fraction": 0.25,
        "gpu_memory_mib": 20480,
        "kind": "job",
        "tenants": ["lab"],
    }
    assert world.post("admin", "/profiles", json=body).status_code == 201
    assert world.post("member", "/profiles", json=body | {"name": "x"}).status_code == 403
    assert [p["name"] for p in world.get("member", "/profiles").json()] == ["quarter"]
    assert world.get("outsider", "/profiles").json() == []
    w = world.submit(profile="quarter")
    assert w["request"]["gpu_fraction"] == 0.25 and w["profile"] == "quarter"
    r = world.post("member", "/workloads", json={"profile": "quarter", "gpus": 1, "command": ["x"]})
    assert r.status_code == 422 and "either a profile or resources" in r.json()["detail"]
    r = world.post("outsider", "/workloads", json={"profile": "quarter", "command": ["x"]})
    assert r.status_code == 403


def test_metrics_health_ready(world):
    world.submit(gpus=1)
    world.scheduler.run_once()
    text = world.scrape()
    assert 'gpupool_workloads{state="running",tenant="lab"} 1.0' in text
    assert 'gpupool_allocated_gpus{tenant="lab"} 1.0' in text
    assert "gpupool_scheduler_cycle_seconds_count" in text
    assert world.client.get("/healthz").json() == {
        "status": "ok",
        "process": "primary",
        "version": gpupool.__version__,
    }
    assert world.client.get("/readyz").status_code == 200


def test_node_registration_and_drain(world):
    body = {
        "cpu_milli": 8000,
        "memory_mib": 64000,
        "gpus": [{"index": 0, "uuid": "GPU-n2-0", "model": "A100", "memory_mib": 40960}],
    }
    r = world.put("admin", "/nodes/n2", json=body)
    assert r.status_code == 200 and r.json()["gpus"][0]["model"] == "A100"
    assert world.put("member", "/nodes/n3", json=body).status_code == 403
    r = world.patch("admin", "/nodes/n2", json={"state": "draining"})
    assert r.json()["state"] == "draining"
    assert [n["name"] for n in world.get("viewer", "/nodes").json()] == ["n1", "n2"]
    assert world.delete("admin", "/nodes/n2").status_code == 204


def test_only_admins_create_tokens_for_other_users(world):
    # JupyterHub with an OAuth authenticator acts for a user through such a token
    r = world.post("admin", "/tokens", json={"name": "hub", "user": "ann"})
    assert r.status_code == 201, r.text
    assert r.json()["user"] == "ann"
    me = world.client.get(
        API + "/auth/me", headers={"Authorization": f"Bearer {r.json()['token']}"}
    )
    assert me.json()["name"] == "ann"
    r = world.post("tenant-admin", "/tokens", json={"name": "x", "user": "ann"})
    assert r.status_code == 403 and "tokens for other users" in r.json()["detail"]
    r = world.post("admin", "/tokens", json={"name": "x", "user": "nobody-here"})
    assert r.status_code == 404 and "nobody-here" in r.json()["detail"]
    # asking for one's own name is the same as omitting it
    assert world.post("member", "/tokens", json={"user": "ann"}).status_code == 201
