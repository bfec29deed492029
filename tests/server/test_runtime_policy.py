"""Runtime policy per tenant and profile (issue 35 part 5): a default and a maximum runtime,
set over the API, applied at submission, a request beyond the maximum refused with the
maximum in the message, a warning before the end and the stop, across a restart of the
culler (its memory lost, the store kept). Real store, ManualClock, fake executor."""

from __future__ import annotations

from gpupool.domain import Tenant, TenantTree, ValidationError
from gpupool.domain.profiles import Profile
from gpupool.domain.runtime import runtime_policy
from gpupool.server.loops.culler import CullerLoop
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.store import EventRepo


def set_policy(world, tenant: str = "lab", role: str = "admin", **body) -> dict:
    r = world.patch(role, f"/tenants/{tenant}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def warnings(world, wid: str) -> int:
    with world.ctx.store.read() as s:
        return len(EventRepo(s).list(workload_id=wid, kind="workload.cull_warning"))


def test_policy_is_set_shown_and_cleared(world):
    got = set_policy(world, default_runtime_s=8 * 3600, max_runtime_s=48 * 3600)
    assert (got["default_runtime_s"], got["max_runtime_s"]) == (28800, 172800)
    got = set_policy(world, clear_default_runtime=True)
    assert got["default_runtime_s"] is None and got["max_runtime_s"] == 172800
    listed = {t["name"]: t for t in world.get("member", "/tenants").json()}
    assert listed["lab"]["max_runtime_s"] == 172800


def test_bad_policy_is_a_4xx_that_says_what_to_do(world):
    r = world.patch("admin", "/tenants/lab", json={"max_runtime_s": -5})
    assert r.status_code == 422 and "max_runtime_s" in r.text
    r = world.patch(
        "admin", "/tenants/lab", json={"default_runtime_s": 7200, "max_runtime_s": 3600}
    )
    assert r.status_code == 422
    assert "default runtime" in r.json()["detail"] and "lower the default" in r.json()["detail"]
    r = world.patch(
        "admin", "/tenants/lab", json={"max_runtime_s": 3600, "clear_max_runtime": True}
    )
    assert r.status_code == 422 and "not both" in r.json()["detail"]
    # a member may not set it
    r = world.patch("member", "/tenants/lab", json={"max_runtime_s": 3600})
    assert r.status_code == 403


def test_request_beyond_the_maximum_is_refused_naming_it(world):
    set_policy(world, max_runtime_s=48 * 3600)
    r = world.post(
        "member", "/workloads", json={"gpus": 1, "command": ["x"], "max_runtime_s": 49 * 3600}
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "maximum of 48 h" in detail and "tenant lab" in detail and "172800" in detail
    ok = world.submit(gpus=1, max_runtime_s=48 * 3600)
    assert ok["max_runtime_s"] == 172800


def test_work_without_a_runtime_gets_the_default_else_the_maximum(world):
    set_policy(world, max_runtime_s=48 * 3600)
    assert world.submit(gpus=1)["max_runtime_s"] == 172800
    set_policy(world, default_runtime_s=8 * 3600)
    assert world.submit(gpus=1)["max_runtime_s"] == 28800
    assert world.submit(gpus=1, max_runtime_s=60)["max_runtime_s"] == 60
    # another tenant's work is untouched
    assert world.submit("outsider", gpus=1)["max_runtime_s"] is None


def test_a_profile_policy_wins_over_the_tenants_for_its_notebooks(world):
    set_policy(world, default_runtime_s=8 * 3600, max_runtime_s=48 * 3600)
    spec = {"gpu_fraction": 0.5, "kind": "job"}
    r = world.post(
        "admin",
        "/profiles",
        json={"name": "nb", **spec, "default_runtime_s": 7200, "max_runtime_s": 4 * 3600},
    )
    assert r.status_code == 201, r.text
    assert r.json()["max_runtime_s"] == 14400
    bad = world.post(
        "member", "/workloads", json={"profile": "nb", "command": ["x"], "max_runtime_s": 5 * 3600}
    )
    assert bad.status_code == 422 and "profile nb" in bad.json()["detail"]
    assert world.submit(profile="nb")["max_runtime_s"] == 7200
    r = world.post(
        "admin", "/profiles", json={"name": "bad", "default_runtime_s": 9, "max_runtime_s": 8}
    )
    assert r.status_code == 422 and "lower the default" in r.json()["detail"]


def test_inherited_policy_nearest_first():
    tree = TenantTree(
        [Tenant("dept", default_runtime_s=3600, max_runtime_s=7200), Tenant("dept/lab")]
    )
    p = runtime_policy(tree, "dept/lab")
    assert (p.default_s, p.max_s, p.max_from) == (3600, 7200, "tenant dept")
    lower = TenantTree([*tree, Tenant("dept/lab/x", max_runtime_s=1800)])
    p = runtime_policy(lower, "dept/lab/x")
    assert (p.default_s, p.max_s) == (1800, 1800)  # the ancestor's default cut to the max
    prof = Profile("nb", max_runtime_s=600)
    assert runtime_policy(tree, "dept/lab", prof).apply(None) == 3600 - 3000
    try:
        runtime_policy(tree, "dept/lab", prof).apply(601)
    except ValidationError as e:
        assert "profile nb" in str(e)
    else:
        raise AssertionError("601 s above a 600 s maximum was accepted")


def test_default_runtime_warns_then_stops_across_a_restart(world):
    set_policy(world, default_runtime_s=3600)
    w = world.submit(gpus=1)
    wid = w["id"]
    world.scheduler.run_once()
    culler = CullerLoop(world.ctx, lambda a: 0.0, warn_before_s=600)
    world.clock.advance(3000)
    assert culler.run_once().warned == [wid]
    assert warnings(world, wid) == 1
    restarted = CullerLoop(world.ctx, lambda a: 0.0, warn_before_s=600)  # memory lost
    world.clock.advance(60)
    assert restarted.run_once().warned == []
    assert warnings(world, wid) == 1  # not warned twice
    world.clock.advance(600)
    assert list(restarted.run_once().culled) == [wid]
    ReconcilerLoop(world.ctx).run_once()
    got = world.get("member", f"/workloads/{wid}").json()
    assert got["state"] == "culled" and "max runtime of 1.0 h" in got["reason"]


def test_a_tenant_admin_may_tighten_the_maximum_below_it_not_lift_it(world):
    """Work runs in leaves, and a subtenant's own maximum wins over its ancestors': were a
    tenant-admin of `lab` free to give `lab/x` any maximum, the one an admin set on `lab`
    would bind nothing (quota limits hold on the whole chain the same way)."""
    set_policy(world, max_runtime_s=48 * 3600)
    r = world.post("tenant-admin", "/tenants", json={"name": "lab/x", "max_runtime_s": 72 * 3600})
    assert r.status_code == 403, r.text
    assert "48 h" in r.json()["detail"] and "tenant lab" in r.json()["detail"]
    r = world.post("tenant-admin", "/tenants", json={"name": "lab/x", "max_runtime_s": 8 * 3600})
    assert r.status_code == 201, r.text
    r = world.patch("tenant-admin", "/tenants/lab/x", json={"max_runtime_s": 49 * 3600})
    assert r.status_code == 403, r.text
    assert set_policy(world, "lab/x", "tenant-admin", max_runtime_s=48 * 3600)["max_runtime_s"]
    assert set_policy(world, "lab/x", "tenant-admin", clear_max_runtime=True)  # inherits 48 h
    # an admin may still give a subtenant a longer maximum than its parent's
    assert set_policy(world, "lab/x", max_runtime_s=72 * 3600)["max_runtime_s"] == 72 * 3600
