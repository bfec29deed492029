"""The memoised JSON of the polling endpoints equals what pydantic's WorkloadOut gives, and
follows every change of the stored row."""

from __future__ import annotations

from gpupool.server.schemas.convert import allocation_out, workload_out
from gpupool.server.workload_json import WorkloadJSONMemo
from gpupool.store import AllocationRepo, WorkloadRepo, attained_milli_s, record_of

NOW = 1_780_000_500.0


def _rows_and_allocs(world):
    with world.ctx.store.read() as s:
        rows = WorkloadRepo(s).rows()
        allocs = AllocationRepo(s).active_for_many([r.id for r in rows])
    return rows, allocs


def _pydantic(rows, allocs, kept=None):
    out = []
    for r in rows:
        a = allocs.get(r.id)
        w = record_of(r).workload
        attained = attained_milli_s(w, (kept or {}).get(r.id, 0.0), a, NOW)
        out.append(
            workload_out(record_of(r), allocation_out(a) if a else None, attained).model_dump(
                mode="json"
            )
        )
    return out


def test_views_equal_the_pydantic_schema_in_every_state(world):
    running = world.submit(gpus=1, name="train")
    world.submit(gpu_fraction=0.25, gpu_memory_mib=4096)
    cancelled = world.submit(gpus=1)
    world.delete("member", f"/workloads/{cancelled['id']}")
    world.scheduler.run_once()
    world.submit(gpus=3, priority=5)  # pending with a reason (lab's limit is 3)
    world.scheduler.run_once()
    world.submit(gpus=1)  # pending, not seen by the scheduler yet
    world.executor.finish(running["id"], 3)
    rows, allocs = _rows_and_allocs(world)
    states = {r.state for r in rows}
    assert {"pending", "cancelled"} <= states and len(allocs) >= 1
    views = WorkloadJSONMemo()
    assert views.workloads(rows, allocs, NOW) == _pydantic(rows, allocs)
    assert any(o["allocation"] for o in views.workloads(rows, allocs, NOW))
    assert any(o["request"]["gpu_fraction"] == 0.25 for o in views.workloads(rows, allocs, NOW))


def test_a_changed_row_is_never_served_from_the_memo(world):
    w = world.submit(gpus=1)
    views = WorkloadJSONMemo()
    rows, allocs = _rows_and_allocs(world)
    assert views.workloads(rows, allocs, NOW)[0]["state"] == "pending"
    assert (views.hits, views.misses) == (0, 1)
    views.workloads(rows, allocs, NOW)
    assert (views.hits, views.misses) == (1, 1)  # unchanged row: memoised
    world.scheduler.run_once()
    rows, allocs = _rows_and_allocs(world)
    got = views.workloads(rows, allocs, NOW)[0]
    assert got["id"] == w["id"] and got["state"] != "pending" and got["allocation"]
    assert views.misses == 2


def test_the_memo_is_bounded(world):
    for _ in range(3):
        world.submit(gpus=1)
    views = WorkloadJSONMemo(max_entries=2)
    rows, allocs = _rows_and_allocs(world)
    assert len(views.workloads(rows, allocs, NOW)) == 3
    assert len(views._memo) <= 2


def test_the_polling_endpoints_answer_from_the_views(world):
    w = world.submit(gpus=1)
    listed = world.get("member", "/workloads").json()
    queued = world.get("member", "/queue").json()
    assert listed[0]["id"] == w["id"] and listed[0]["state"] == "pending"
    assert queued[0]["workload"]["id"] == w["id"]
    assert queued[0]["reason"] == "waiting for the next scheduling cycle"
    world.scheduler.run_once()
    assert world.get("member", "/workloads").json()[0]["state"] != "pending"
    assert world.get("member", "/queue").json() == []
    assert world.ctx.workload_json.hits + world.ctx.workload_json.misses >= 3
