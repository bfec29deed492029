"""The per-user cap on pending workloads (review F14): over it a submit is a 429 problem
that says the limit and what to do; cancelling or starting work makes room again."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.server.settings import Settings

JOB = {"tenant": "lab", "gpus": 1, "command": ["python", "train.py"]}


@pytest.fixture
def capped(world):
    world.ctx.settings = dataclasses.replace(world.ctx.settings, max_pending_per_user=3)
    return world


def test_a_submit_over_the_cap_is_a_429_that_says_what_to_do(capped):
    w = capped
    ids = [w.submit("member", **JOB)["id"] for _ in range(3)]
    r = w.post("member", "/workloads", json=JOB)
    assert r.status_code == 429, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert int(r.headers["Retry-After"]) > 0
    detail = r.json()["detail"]
    assert "3 pending" in detail and "GPUPOOL_MAX_PENDING_PER_USER=3" in detail
    assert "cancel" in detail
    # the cap is per user: another submitter still gets in
    assert w.post("tenant-admin", "/workloads", json=JOB).status_code == 201
    # cancelling one makes room
    assert w.delete("member", f"/workloads/{ids[0]}").status_code == 200
    assert w.post("member", "/workloads", json=JOB).status_code == 201
    assert w.post("member", "/workloads", json=JOB).status_code == 429


def test_work_that_started_no_longer_counts(capped):
    w = capped
    for _ in range(3):
        w.submit("member", **JOB)
    assert w.post("member", "/workloads", json=JOB).status_code == 429
    admitted = w.scheduler.run_once().admitted
    assert admitted  # lab's GPUs start some of them
    assert w.post("member", "/workloads", json=JOB).status_code == 201


def test_admins_are_capped_too(capped):
    for _ in range(3):
        capped.submit("admin", **JOB)
    assert capped.post("admin", "/workloads", json=JOB).status_code == 429


def test_no_cap_when_set_to_zero(world):
    world.ctx.settings = dataclasses.replace(world.ctx.settings, max_pending_per_user=0)
    for _ in range(5):
        world.submit("member", **JOB)


def test_the_cap_is_a_setting_with_a_default():
    assert Settings().max_pending_per_user == 1000
    env = {"GPUPOOL_MAX_PENDING_PER_USER": "25"}
    assert Settings.from_env(env).max_pending_per_user == 25
    with pytest.raises(ValueError, match="GPUPOOL_MAX_PENDING_PER_USER"):
        Settings.from_env({"GPUPOOL_MAX_PENDING_PER_USER": "many"})
