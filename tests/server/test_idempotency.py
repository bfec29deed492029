"""`Idempotency-Key` on POST /workloads (issue 13, item 9): a retried submission answers with
the workload already made, never a duplicate; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid

from gpupool.server.auth import principal_for_token
from gpupool.server.schemas.workloads import WorkloadIn
from gpupool.server.services import idempotency
from gpupool.store import WorkloadRepo
from tests.server.conftest import API

JOB = {"tenant": "lab", "gpus": 1, "command": ["python", "train.py"]}


def submit(world, role: str, key: str | None, body: dict | None = None):
    headers = world.h(role)
    if key is not None:
        headers["Idempotency-Key"] = key
    return world.client.post(API + "/workloads", json=body or JOB, headers=headers)


def count(world) -> int:
    with world.ctx.store.read() as s:
        return len(WorkloadRepo(s).list())


def test_a_retry_with_the_same_key_answers_with_the_first_workload(world):
    key = str(uuid.uuid4())
    first = submit(world, "member", key)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    again = submit(world, "member", key)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert count(world) == 1


def test_the_same_key_with_another_request_is_refused(world):
    key = str(uuid.uuid4())
    wid = submit(world, "member", key).json()["id"]
    r = submit(world, "member", key, {**JOB, "gpus": 2})
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    detail = r.json()["detail"]
    assert key in detail and wid in detail and "new key" in detail
    assert r.json()["errors"][0]["field"] == "Idempotency-Key"
    assert count(world) == 1


def test_keys_belong_to_their_user(world):
    key = "shared-key-1"
    a = submit(world, "member", key)
    b = submit(world, "tenant-admin", key)
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]
    assert count(world) == 2


def test_without_a_key_every_request_submits(world):
    assert submit(world, "member", None).status_code == 201
    assert submit(world, "member", None).status_code == 201
    assert count(world) == 2


def test_a_malformed_key_is_a_clear_422(world):
    for bad in ("has space", "x" * 256, ""):
        r = submit(world, "member", bad)
        assert r.status_code == 422, (bad, r.text)
        assert "Idempotency-Key" in r.text
    assert count(world) == 0


def test_a_refused_submission_does_not_take_the_key(world):
    key = str(uuid.uuid4())
    r = submit(world, "member", key, {**JOB, "gpus": 99})
    assert r.status_code == 422
    ok = submit(world, "member", key, JOB)
    assert ok.status_code == 201, ok.text


def test_concurrent_requests_with_one_key_make_one_workload(world):
    p = principal_for_token(world.ctx, world.tokens["member"])
    body = WorkloadIn.model_validate(JOB)
    results: list[tuple[str, bool]] = []
    errors: list[BaseException] = []
    go = threading.Barrier(6)

    def one() -> None:
        try:
            go.wait(10)
            out, created = idempotency.submit(world.ctx, p, body, "the-same-key")
            results.append((out.id, created))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len({wid for wid, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert count(world) == 1
