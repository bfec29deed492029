"""`checkpointing` on a submitted workload: stored, shown, and seen by the scheduler."""

from __future__ import annotations


def test_checkpointing_is_accepted_stored_and_reaches_the_scheduler(world):
    r = world.post(
        "member", "/workloads", json={"command": ["x"], "gpus": 1, "checkpointing": True}
    )
    assert r.status_code == 201, r.text
    wid = r.json()["id"]
    assert r.json()["checkpointing"] is True
    got = world.get("member", f"/workloads/{wid}")
    assert got.json()["checkpointing"] is True
    _, pending = world.scheduler.snapshot()
    assert [w.checkpointing for w in pending if w.id == wid] == [True]
    plain = world.post("member", "/workloads", json={"command": ["x"], "gpus": 1})
    assert plain.json()["checkpointing"] is False


def test_checkpointing_must_be_a_boolean(world):
    r = world.post("member", "/workloads", json={"command": ["x"], "gpus": 1, "checkpointing": "x"})
    assert r.status_code == 422
