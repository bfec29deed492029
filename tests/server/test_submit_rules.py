"""Submit refuses exactly what the scheduler could never run, under the policy the
scheduler runs: both use one rule (gpupool.scheduler.feasibility.never_runs), so they cannot
disagree. The simulator's side is tests/sim/test_one_rule.py."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import Membership, Quota, Request, Role, SharingMode, Tenant, Workload
from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.types import Policy
from gpupool.store import NodeRepo, TenantRepo, UserRepo


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
    assert (
        "asks for 2 GPUs but the per-user cap in dept is 1 GPU; ask for at most 1 GPU or ask an "
        "admin to raise it" in r.json()["detail"]
    )
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


ASKS = {
    "within the limit": {"gpus": 2},
    "over lab's limit of 3": {"gpus": 4},
    "a fraction, no shared GPU": {"gpu_fraction": 0.5},
    "more than a node has": {"gpus": 9},
}


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("ask", list(ASKS))
def test_submit_refuses_what_the_cycle_would_fail_under_each_policy(world, policy, ask):
    """Before, submit ignored the policy: under fifo it refused a fraction on exclusive GPUs
    (the fifo cycle runs it on a whole GPU) and, under fifo and las, a request over its
    tenant's limit (those policies apply no limits)."""
    with world.ctx.store.write() as s:
        NodeRepo(s).set_sharing("GPU-n1-3", SharingMode.EXCLUSIVE)  # no shared GPU left
    world.ctx.settings = dataclasses.replace(
        world.ctx.settings, scheduler=SchedulerConfig(policy=policy)
    )
    body = ASKS[ask]
    r = world.post("member", "/workloads", json={"command": ["x"], "tenant": "lab", **body})
    snap, _ = world.scheduler.snapshot()
    milli = int(body.get("gpu_fraction", 0) * 1000)
    probe = Workload("probe", "lab", "ann", Request(gpus=body.get("gpus", 0), gpu_milli=milli))
    why = cycle(snap, [probe], world.clock.now(), world.ctx.settings.scheduler).unschedulable
    if "probe" in why:
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["detail"] == f"this request can never run: {why['probe']}"
    else:
        assert r.status_code == 201, r.text
