"""Submit refuses exactly what the scheduler could never run: both use one rule
(gpupool.scheduler.admissible.never_runs), so they cannot disagree."""

from __future__ import annotations

from gpupool.domain import Membership, Quota, Role, Tenant
from gpupool.scheduler import cycle
from gpupool.store import TenantRepo, UserRepo


def _dept_with_a_per_user_cap(world) -> None:
    """dept caps each user at 1 GPU; its leaf dept/team sets no cap of its own."""
    now = world.clock.now()
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("dept", Quota.gpus(0, 4, max_per_user=1)), now, create=True)
        TenantRepo(s).save(Tenant("dept/team", Quota.gpus(0, 4)), now, create=True)
        UserRepo(s).set_membership(Membership("ann", "dept/team", Role.MEMBER))


def test_a_per_user_cap_on_an_ancestor_refuses_the_submit(world):
    """Before, submit checked the per-user cap of the leaf tenant only: this request was
    accepted and then failed by the scheduler, which checks every ancestor's cap."""
    _dept_with_a_per_user_cap(world)
    r = world.post(
        "member", "/workloads", json={"command": ["x"], "gpus": 2, "tenant": "dept/team"}
    )
    assert r.status_code == 422, r.text
    assert "dept allows at most 1 GPU per user; ask for at most 1" in r.json()["detail"]
    ok = world.post(
        "member", "/workloads", json={"command": ["x"], "gpus": 1, "tenant": "dept/team"}
    )
    assert ok.status_code == 201, ok.text


def test_what_submit_accepts_the_scheduler_does_not_call_unschedulable(world):
    _dept_with_a_per_user_cap(world)
    world.submit(gpus=1, tenant="dept/team")
    snap, pending = world.scheduler.snapshot()
    decisions = cycle(snap, pending, world.clock.now(), world.ctx.settings.scheduler)
    assert decisions.unschedulable == {}


def test_hardware_no_node_has_is_refused_with_the_schedulers_reason(world):
    r = world.post("member", "/workloads", json={"command": ["x"], "gpus": 9})
    assert r.status_code == 422
    body = r.json()
    assert "can never run: needs 9 GPUs on one node; the most any node has is 4" in body["detail"]
