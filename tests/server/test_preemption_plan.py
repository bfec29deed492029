"""Running work that a reclaim will take is told so (issue 30 item 6): the victim side of a
waiting workload's `owed` wait, as `preemption` on the workload (GET /workloads/{id} and the
list), with the very time and tenant of that wait; the preemption then happens at that time."""

from __future__ import annotations

from datetime import datetime

from gpupool.domain import Quota, Tenant
from gpupool.store import TenantRepo


def _borrowing(world) -> tuple[str, str]:
    """ "other" (guaranteed 1 GPU) borrows all 4; then lab (guaranteed 2) asks for 2."""
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, 4)), 0, create=False)
    big = world.submit(role="outsider", gpus=4)["id"]
    world.scheduler.run_once()
    world.clock.advance(3600)  # past its minimum runtime
    small = world.submit(gpus=2)
    assert world.scheduler.run_once().preempted == []  # owed, not due yet
    return big, small["id"]


def test_the_victim_of_a_planned_reclaim_says_when_and_for_whom(world):
    big, small = _borrowing(world)
    waiting = world.get("member", f"/workloads/{small}").json()
    wait = waiting["pending"]["wait"]
    assert wait["kind"] == "owed" and wait["victims"] == [big]

    victim = world.get("outsider", f"/workloads/{big}").json()
    assert victim["state"] == "running"
    plan = victim["preemption"]
    assert plan["at"] == wait["until"]  # the waiting side's promise, to the second
    assert plan["for_tenant"] == "lab" and plan["for_workload"] == small
    hhmm = datetime.fromisoformat(wait["until"].replace("Z", "+00:00")).strftime("%H:%M")
    assert plan["reason"] == (
        f"will be preempted at {hhmm} UTC for lab's guarantee unless GPUs free up"
    )
    listed = {w["id"]: w for w in world.get("admin", "/workloads").json()}
    assert listed[big]["preemption"] == plan
    assert listed[small]["preemption"] is None

    # kept: preempted once that time has come, not before
    until = datetime.fromisoformat(wait["until"].replace("Z", "+00:00")).timestamp()
    world.clock.set(until - 1)
    assert world.scheduler.run_once().preempted == []
    world.clock.set(until)
    assert world.scheduler.run_once().preempted == [big]
    after = world.get("admin", f"/workloads/{big}").json()
    assert after["state"] == "pending" and after["preemption"] is None


def test_no_plan_once_the_waiting_work_is_gone(world):
    big, small = _borrowing(world)
    assert world.get("admin", f"/workloads/{big}").json()["preemption"] is not None
    assert world.delete("member", f"/workloads/{small}").status_code == 200
    assert world.get("admin", f"/workloads/{big}").json()["preemption"] is None
    listed = {w["id"]: w for w in world.get("admin", "/workloads").json()}
    assert listed[big]["preemption"] is None
