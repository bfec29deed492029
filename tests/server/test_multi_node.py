"""Multi-node requests through the API (issue 19): nodes and gpus_per_node in and out, one
allocation spanning nodes stored and launched whole, clear 422s for what cannot run (too few
nodes, notebooks, an engine that runs on one node)."""

from __future__ import annotations

from gpupool.domain import GPU, Node, Quota, Tenant
from gpupool.engines.common.executor import ExecutorWithMultiNode
from gpupool.engines.fake.executor import OneNodeExecutor
from gpupool.engines.local.executor import LocalExecutor
from gpupool.store import NodeRepo, TenantRepo


def _second_node(world) -> None:
    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node(
                "n2",
                tuple(GPU(i, f"GPU-n2-{i}", "H100", 81920) for i in range(4)),
                cpu_milli=64000,
                memory_mib=512000,
            )
        )
        TenantRepo(s).save(Tenant("lab", Quota.gpus(8, 8)), world.clock.now())


def test_a_gang_is_admitted_on_two_nodes_and_launched_as_one(world):
    _second_node(world)
    # n1's GPU 3 is shared: whole GPUs of n1 are 0..2 and the shared one, all four usable
    w = world.submit(nodes=2, gpus_per_node=3, cpus=2)
    assert w["request"]["nodes"] == 2 and w["request"]["gpus_per_node"] == 3
    assert w["request"]["gpus"] == 6 and w["request"]["description"] == "2 nodes x 3 GPUs"
    world.scheduler.run_once()
    got = world.get("member", f"/workloads/{w['id']}").json()
    alloc = got["allocation"]
    assert alloc["nodes"] == ["n1", "n2"] and alloc["node"] == "n1"
    by_node: dict[str, int] = {}
    for s in alloc["shares"]:
        by_node[s["node"]] = by_node.get(s["node"], 0) + 1
    assert by_node == {"n1": 3, "n2": 3}
    proc = world.executor.world.processes[w["id"]]
    assert proc.allocation is not None and proc.allocation.nodes == ("n1", "n2")
    # the nodes are held: a 4-GPU job on one node waits (n1 has 1 left, n2 has 1)
    j = world.submit(gpus=2)
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{j['id']}").json()["state"] == "pending"


def test_gpus_may_be_given_as_the_total(world):
    _second_node(world)
    w = world.submit(nodes=2, gpus=4)
    assert w["request"]["gpus_per_node"] == 2


def test_too_few_nodes_is_refused_with_what_is_missing(world):
    _second_node(world)
    r = world.post("member", "/workloads", json={"command": ["x"], "nodes": 3, "gpus_per_node": 2})
    assert r.status_code == 422, r.text
    assert "needs 3 nodes with 2 GPUs each; only 2 nodes could ever hold that" in r.json()["detail"]


def test_bad_multi_node_input_is_a_clear_422(world):
    cases = [
        ({"nodes": 2}, "needs gpus_per_node"),
        ({"nodes": 2, "gpus": 5, "gpus_per_node": 2}, "nodes x gpus_per_node"),
        ({"nodes": 2, "gpus": 3}, "same number of whole GPUs on each node"),
        ({"nodes": 2, "gpus_per_node": 1, "gpu_fraction": 0.5}, "whole GPUs"),
        ({"nodes": 0, "gpus": 1}, "nodes"),
    ]
    for body, text in cases:
        r = world.post("member", "/workloads", json={"command": ["x"], **body})
        assert r.status_code == 422, (body, r.text)
        assert text in r.text, (body, r.text)
    nb = world.post("member", "/workloads", json={"kind": "notebook", "nodes": 2, "gpus": 2})
    assert nb.status_code == 422 and "a notebook runs on one node" in nb.json()["detail"]


def test_an_engine_that_runs_on_one_node_refuses_multi_node_at_submit(world):
    assert not issubclass(LocalExecutor, ExecutorWithMultiNode)  # the local engine's executor
    world.ctx.executor = OneNodeExecutor(world.clock, world=world.executor.world)
    _second_node(world)
    r = world.post("member", "/workloads", json={"command": ["x"], "nodes": 2, "gpus_per_node": 1})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "with the fake engine, on one node" in detail
    assert "needs an engine that runs one workload across several nodes" in detail
    ok = world.post("member", "/workloads", json={"command": ["x"], "gpus": 1})
    assert ok.status_code == 201


def test_a_profile_is_one_node(world):
    body = {"name": "wide", "nodes": 2, "gpus_per_node": 2, "kind": "job", "tenants": ["lab"]}
    r = world.post("admin", "/profiles", json=body)
    assert r.status_code == 422 and "a profile is one node" in r.json()["detail"]
    # and a profile's request is one node when used (profiles store no nodes)
    one = body | {"name": "one", "nodes": 1, "gpus_per_node": None, "gpus": 1}
    assert world.post("admin", "/profiles", json=one).status_code == 201
    assert world.submit(profile="one")["request"]["nodes"] == 1
