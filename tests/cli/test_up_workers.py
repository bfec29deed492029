"""`gpupool up --workers 2` as a real subprocess: two API worker processes serve the port in
front of the primary. A submission served by a worker is admitted at once although the
scheduler's timer is an hour (the worker woke it over the bus); the job's logs come from the
primary's executor through a worker; a token revoked through one process stops working on
all; kill -9 of the primary takes its workers down, and a new start serves the same port.

Waits are bounded waits on the real processes, never assumptions about durations."""

from __future__ import annotations

import signal

import httpx
import psutil
import pytest

from tests.cli.test_up import Up, login
from tests.support import free_port, wait_for

pytestmark = pytest.mark.slow
API = "/api/v1"


def _processes(url: str, n: int) -> set[str]:
    """Names of the processes that answer /healthz, over `n` fresh connections."""
    names = set()
    for _ in range(n):
        try:
            with httpx.Client(timeout=5) as fresh:
                names.add(fresh.get(f"{url}/healthz").json()["process"])
        except httpx.HTTPError:
            pass
    return names


def _fresh(url: str, method: str, path: str, h: dict[str, str]) -> int:
    with httpx.Client(timeout=10) as fresh:
        return fresh.request(method, f"{url}{API}{path}", headers=h).status_code


def test_up_with_api_workers(tmp_path):
    data_dir, port = tmp_path / "data", free_port()
    hour = {"GPUPOOL_SCHEDULER_INTERVAL_S": "3600"}
    up = Up(data_dir, port, "--workers", "2", env=hour)
    try:
        up.wait_ready()
        wait_for(lambda: _processes(up.url, 8) == {"worker-1", "worker-2"}, "both workers")
        assert "2 API worker process(es) serve port" in up.output
        workers = psutil.Process(up.proc.pid).children()
        assert len(workers) == 2

        h = login(up.url)  # answered by a worker
        r = httpx.post(
            f"{up.url}{API}/workloads",
            headers=h,
            json={"gpus": 1, "command": ["sh", "-c", "echo CVD=$CUDA_VISIBLE_DEVICES"]},
        )
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        done = wait_for(
            lambda: (
                (w := httpx.get(f"{up.url}{API}/workloads/{wid}", headers=h).json())["state"]
                == "succeeded"
                and w
            ),
            what="the job to run to its end",
        )
        gpu = done["allocation"]["shares"][0]["gpu_uuid"]
        logs = httpx.get(f"{up.url}{API}/workloads/{wid}/logs", headers=h)  # the executor's
        assert logs.status_code == 200 and f"CVD={gpu}" in logs.text
        metrics = httpx.get(f"{up.url}/metrics").text  # the primary's counters and telemetry
        assert 'gpupool_scheduler_decisions_total{kind="admitted"} 1.0' in metrics
        assert "DCGM_FI_DEV_GPU_UTIL" in metrics
        assert httpx.get(f"{up.url}/readyz").status_code == 200

        # a token every worker has checked (and cached) stops working everywhere once revoked
        made = httpx.post(f"{up.url}{API}/tokens", headers=h, json={"name": "t2"}).json()
        h2 = {"Authorization": f"Bearer {made['token']}"}
        assert all(_fresh(up.url, "GET", "/auth/me", h2) == 200 for _ in range(8))
        assert _fresh(up.url, "DELETE", f"/tokens/{made['id']}", h) == 200
        wait_for(
            lambda: all(_fresh(up.url, "GET", "/auth/me", h2) == 401 for _ in range(8)),
            "the revoked token to be refused by every process",
            timeout=10,
        )

        up.stop(signal.SIGKILL)  # the primary dies hard: its workers must not linger
        wait_for(
            lambda: not any(p.is_running() and p.status() != "zombie" for p in workers),
            "the workers to exit after the primary's death",
        )

        again = Up(data_dir, port, "--workers", "2", env=hour)
        try:
            again.wait_ready()
            wait_for(lambda: _processes(again.url, 8) == {"worker-1", "worker-2"}, "restart")
            h = login(again.url)
            w = httpx.get(f"{again.url}{API}/workloads/{wid}", headers=h).json()
            assert w["state"] == "succeeded"
            assert again.stop(signal.SIGINT) == 0
            assert "Traceback" not in again.output
        finally:
            if again.proc.poll() is None:
                again.proc.kill()
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
