"""A real Prometheus scrapes `gpupool_gpu_outside` for a GPU used outside gpupool (and none
for the others); the DCGM series of that GPU are unchanged (it is healthy)."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from gpupool.domain import OutsideUse
from gpupool.store import NodeRepo
from tests.server.test_prometheus import HOST, Cluster, Prometheus, pytestmark  # noqa: F401
from tests.support import ServedApp, wait_for


@pytest.fixture
def served_outside(tmp_path):
    cluster = Cluster(tmp_path)
    with cluster.store.write() as s:
        node = NodeRepo(s).get(HOST)
        gpus = list(node.gpus)
        gpus[1] = dataclasses.replace(gpus[1], outside=OutsideUse("slurm job 4711", "bob", 5.0))
        NodeRepo(s).upsert(dataclasses.replace(node, gpus=tuple(gpus)))
    cluster.telemetry.run_once()
    with ServedApp(cluster.app) as url:
        yield cluster, url, gpus[1].uuid
    cluster.store.close()


def test_prometheus_sees_the_gpu_used_outside_gpupool(served_outside, tmp_path):
    cluster, url, uuid = served_outside
    text = httpx.get(f"{url}/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("gpupool_gpu_outside{")]
    assert len(lines) == 1 and f'UUID="{uuid}"' in lines[0] and 'user="bob"' in lines[0]
    prom = Prometheus(tmp_path, url.removeprefix("http://"))
    try:
        (res,) = wait_for(
            lambda: prom.query('gpupool_gpu_outside{holder="slurm job 4711"}'),
            "Prometheus to scrape the outside GPU",
            timeout=30,
        )
        assert res["metric"]["UUID"] == uuid and res["metric"]["Hostname"] == HOST
        assert res["metric"]["user"] == "bob" and res["value"][1] == "1"
        # still healthy: its DCGM series are there as before
        assert wait_for(
            lambda: prom.query(f'DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}'), "DCGM series", timeout=15
        )
    finally:
        prom.stop()
