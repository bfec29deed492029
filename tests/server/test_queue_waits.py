"""Why-pending through the API (issue 17): a wait that ends at a known time says so in
`/api/v1/queue` and in the workload's `pending`, as text and as a structured `wait`."""

from __future__ import annotations

from datetime import UTC, datetime


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_queue_says_whose_gpus_are_owed_and_when_they_are_taken(world):
    # "other" (guaranteed 1) borrows all 4 GPUs; then lab (guaranteed 2) asks for 2
    big = world.submit(role="outsider", gpus=4)
    world.scheduler.run_once()
    world.clock.advance(3600)  # past the minimum runtime
    small = world.submit(gpus=2)
    report = world.scheduler.run_once()
    assert report.preempted == []  # not before reclaim_after_s
    until = small["submitted_at"] + world.ctx.settings.scheduler.reclaim_after_s
    clock = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    r = world.get("member", "/queue")
    assert r.status_code == 200
    (entry,) = r.json()
    assert entry["workload"]["id"] == small["id"]
    assert entry["reason"] == (
        "no node has 2 free GPUs on one host: all 4 GPUs are in use; lab is owed 2 GPUs within its "
        f"guarantee: unless they free up first, they will be taken from {big['id']} of other "
        f"at {clock}"
    )
    assert entry["wait"] == {
        "kind": "owed",
        "owed_gpus": 2.0,
        "victims": [big["id"]],
        "until": _iso(until),
        "node": None,  # no node has a free GPU to keep for it
        "expected_start": None,
    }
    got = world.get("member", f"/workloads/{small['id']}").json()
    assert got["pending"]["reason"] == entry["reason"]
    assert got["pending"]["wait"] == entry["wait"]

    # when it is due, the GPUs are reclaimed and the wait says so
    world.clock.advance(world.ctx.settings.scheduler.reclaim_after_s)
    assert world.scheduler.run_once().preempted == [big["id"]]
    (entry,) = world.get("member", "/queue").json()
    assert entry["reason"].startswith("reclaiming its guaranteed share")
    assert entry["wait"]["kind"] == "reclaiming" and entry["wait"]["victims"] == [big["id"]]


def test_a_plain_wait_has_no_structured_part(world):
    world.submit(gpus=3)
    b = world.submit(gpus=1)
    world.scheduler.run_once()
    (entry,) = world.get("member", "/queue").json()
    assert entry["workload"]["id"] == b["id"]
    assert entry["reason"].startswith("lab is at its limit of 3 GPUs")
    assert entry["wait"] is None and entry["workload"]["pending"]["wait"] is None
