"""/api/v1/node-pools (issue 34): admins define, change and delete pools; everyone lists
them with their nodes' states and requests in flight (workload ids for admins only); bad
pools are refused with a 422 problem that names the field and says what to do."""

from __future__ import annotations

import pytest

from gpupool.domain.nodepools import NodeRequest, PoolNode, PoolNodeState
from gpupool.store import NodePoolRepo

BODY = {
    "name": "gpu-h100",
    "gpus": 8,
    "gpu_model": "H100",
    "cpus": 96,
    "memory_mib": 1_000_000,
    "labels": {"cloud": "aws"},
    "min_nodes": 0,
    "max_nodes": 4,
    "boot_seconds": 240,
    "cost_per_gpu_hour": 2.5,
}


def test_define_list_change_and_delete(world):
    r = world.post("admin", "/node-pools", json=BODY)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["counts"] == {"up": 0, "requested": 0, "booting": 0, "powered_down": 0}
    assert (out["cpus"], out["labels"], out["idle_seconds"]) == (96, {"cloud": "aws"}, 600)
    assert world.post("admin", "/node-pools", json=BODY).status_code == 409
    with world.ctx.store.write() as s:
        repo = NodePoolRepo(s)
        repo.put_node(PoolNode("h1", "gpu-h100", PoolNodeState.UP, 10.0, 10.0))
        repo.put_node(PoolNode("h2", "gpu-h100", PoolNodeState.BOOTING, 20.0))
        repo.put_request(NodeRequest("r1", "gpu-h100", 1, ("w-1",), 20.0))
    mine = world.get("outsider", "/node-pools").json()
    assert [p["name"] for p in mine] == ["gpu-h100"]
    assert mine[0]["counts"] == {"up": 1, "requested": 0, "booting": 1, "powered_down": 0}
    (req,) = mine[0]["requests"]
    assert (req["count"], req["deadline"], req["workload_count"]) == (1, 1820.0, 1)
    assert req["for_workloads"] == []  # another tenant's work: not named to a member
    assert world.get("admin", "/node-pools/gpu-h100").json()["requests"][0]["for_workloads"] == [
        "w-1"
    ]
    r = world.patch("admin", "/node-pools/gpu-h100", json={"max_nodes": 6, "cpus": 48})
    assert r.status_code == 200, r.text
    assert (r.json()["max_nodes"], r.json()["cpus"], r.json()["gpus"]) == (6, 48, 8)
    r = world.delete("admin", "/node-pools/gpu-h100")
    assert r.status_code == 409 and "not powered down" in r.json()["detail"]
    with world.ctx.store.write() as s:
        NodePoolRepo(s).remove_node("h1")
        NodePoolRepo(s).remove_node("h2")
    assert world.delete("admin", "/node-pools/gpu-h100").status_code == 204
    assert world.get("member", "/node-pools/gpu-h100").status_code == 404


def test_only_admins_write(world):
    assert world.post("tenant-admin", "/node-pools", json=BODY).status_code == 403
    assert world.post("member", "/node-pools", json=BODY).status_code == 403


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"max_nodes": 1, "min_nodes": 2}, "below min_nodes"),
        ({"max_nodes": 0}, "max_nodes must be >= 1"),
        ({"boot_seconds": 0}, "boot_seconds must be above 0"),
        ({"boot_seconds": -3}, "boot_seconds must be above 0"),
        ({"cost_per_gpu_hour": -1}, "cost_per_gpu_hour must be >= 0"),
        ({"cpus": 0}, "could run no workload"),
        ({"memory_mib": 0}, "could run no workload"),
        ({"gpu_model": ""}, "which GPU model"),
        ({"request_timeout_seconds": 60}, "shorter than boot_seconds"),
        ({"labels": {"bad key!": "x"}}, "label key"),
        ({"name": "GPU_pool"}, "name"),
        ({"gpus": -1}, "gpus"),
        ({"surprise": 1}, "surprise"),
        ({"boot_seconds": "soon"}, "boot_seconds"),
    ],
)
def test_bad_pools_are_a_clear_422_and_nothing_is_stored(world, change, words):
    r = world.post("admin", "/node-pools", json={**BODY, **change})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert words in r.text
    assert world.get("admin", "/node-pools").json() == []


def test_a_bad_change_is_refused_and_the_pool_kept(world):
    assert world.post("admin", "/node-pools", json=BODY).status_code == 201
    r = world.patch("admin", "/node-pools/gpu-h100", json={"min_nodes": 9})
    assert r.status_code == 422 and "below min_nodes" in r.text
    assert world.get("admin", "/node-pools/gpu-h100").json()["min_nodes"] == 0
    assert world.patch("admin", "/node-pools/nope", json={"max_nodes": 2}).status_code == 404


def test_a_change_accepts_what_a_new_pool_accepts():
    """NodePoolPatchIn's fields take the same values as NodePoolSpecIn's (one set of bounds):
    a pool could otherwise be changed into one that could not be made, or the other way."""
    from gpupool.api.nodepools import NodePoolPatchIn, NodePoolSpecIn

    spec = NodePoolSpecIn.model_json_schema()["properties"]
    patch = NodePoolPatchIn.model_json_schema()["properties"]
    assert set(patch) == set(spec)
    for name, field in patch.items():
        given = [s for s in field["anyOf"] if s.get("type") != "null"]
        want = [s for s in spec[name].get("anyOf", [spec[name]]) if s.get("type") != "null"]
        strip = {"default", "title", "description"}
        assert [{k: v for k, v in s.items() if k not in strip} for s in given] == [
            {k: v for k, v in s.items() if k not in strip} for s in want
        ], name
