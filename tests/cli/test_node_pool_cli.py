"""`gpupool node-pool ls|add|set|rm` (issue 34) against a real server, and the typed client's
node pool calls (sync and async)."""

from __future__ import annotations

import asyncio
import json

from gpupool.api.nodepools import NodePoolIn, NodePoolPatchIn
from gpupool.client import AsyncClient, Client
from tests.cli.test_client import as_, env, gp, server  # noqa: F401  (fixtures)


def test_add_ls_set_rm(env):  # noqa: F811
    _, ctx = env
    t = as_(ctx, "root")
    r = gp(
        "node-pool", "add", "gpu-h100", "--gpus", "8", "--gpu-model", "H100", "--cpus", "96",
        "--memory", "1000G", "--max", "4", "--boot-seconds", "240", "--cost", "2.5",
        "--label", "cloud=aws", token=t,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "added node pool gpu-h100: 8xH100, 96 CPU, 1000 GiB, 0-4" in r.output
    table = gp("node-pool", "ls", token=as_(ctx, "ann")).output
    assert "gpu-h100" in table and "4m" in table
    assert max(len(line) for line in table.splitlines()) <= 80
    (p,) = json.loads(gp("node-pool", "ls", "--json", token=t).output)
    assert (p["labels"], p["cost_per_gpu_hour"]) == ({"cloud": "aws"}, 2.5)
    r = gp("node-pool", "set", "gpu-h100", "--min", "9", token=t)
    assert r.exit_code == 1 and "below min_nodes" in r.output
    r = gp("node-pool", "set", "gpu-h100", "--max", "6", token=t)
    assert r.exit_code == 0 and "0-6" in r.output, r.output
    r = gp(
        "node-pool", "set", "gpu-h100", "--boot-seconds", "90", "--timeout-seconds", "5400", token=t
    )
    assert r.exit_code == 0, r.output
    wide = gp("node-pool", "ls", "-o", "wide", token=t).output
    assert "1m30s" in wide and "1h30m" in wide  # times as every table writes them
    assert gp("node-pool", "set", "gpu-h100", token=t).exit_code == 2
    r = gp("node-pool", "add", "x", "--gpus", "1", "--gpu-model", "A", token=t)
    assert r.exit_code == 2 and "give --cpus" in r.output
    # --label is checked as the server checks node labels (as `run --node-label` is)
    r = gp("node-pool", "set", "gpu-h100", "--label", "cloud", token=t)
    assert r.exit_code == 2 and "--label" in r.output and "KEY=VALUE" in r.output
    r = gp("node-pool", "set", "gpu-h100", "--label", "a=1", "--label", "a=2", token=t)
    assert r.exit_code == 2 and "given twice" in r.output
    r = gp(
        "node-pool", "add", "bad", "--cpus", "1", "--memory", "1G", "--boot-seconds", "0", token=t
    )
    assert r.exit_code == 1 and "boot_seconds must be above 0" in r.output
    r = gp("node-pool", "rm", "gpu-h100", token=as_(ctx, "ann"))
    assert r.exit_code == 1 and "admin" in r.output
    assert gp("node-pool", "rm", "gpu-h100", token=t).exit_code == 0
    assert "no node pools" in gp("node-pool", "ls", token=t).output


def test_typed_clients(env):  # noqa: F811
    url, ctx = env
    t = as_(ctx, "root")
    body = NodePoolIn(name="p1", gpus=1, gpu_model="A100", cpus=8, memory_mib=65536)
    with Client(url, t) as c:
        assert c.create_node_pool(body).name == "p1"
        assert c.update_node_pool("p1", NodePoolPatchIn(max_nodes=3)).max_nodes == 3
        assert [p.name for p in c.node_pools()] == ["p1"]

    async def go() -> None:
        async with AsyncClient(url, t) as a:
            assert (await a.node_pool("p1")).max_nodes == 3
            await a.delete_node_pool("p1")
            assert await a.node_pools() == []

    asyncio.run(go())
