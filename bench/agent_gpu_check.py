"""Real-GPU check of `gpupool agent` (not a benchmark): NVML through the agent, reported to a
real `gpupool up`, seen in /api/v1/nodes and /metrics.

Starts `gpupool up --simulate 1xH100-80GB --node-name sim-server` (its own node simulated, so
that the real GPUs are registered by the agent alone), creates a node credential, runs a
PyTorch process on GPU 0 carrying GPUPOOL_WORKLOAD_ID (bench/telemetry_gpu_worker.py) and
then `gpupool agent --once` on the real GPUs. Checks: every GPU nvidia-smi lists is reported,
not simulated, with utilization and memory; the worker's pid is reported on GPU 0 with its
workload marker and its memory; the DCGM series carry the node's name. Writes
`agent_gpu_check.json` to the output directory; exit code 0 when every check passes.

    python bench/agent_gpu_check.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

GPUPOOL = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]
PASSWORD = "agent-gpu-check"
NODE = "real-gpu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(check, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
        except httpx.HTTPError:
            got = None
        if got:
            return got
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/agent_gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-agent-check-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD)
    env.pop("GPUPOOL_DATABASE_URL", None)
    up = subprocess.Popen(
        [*GPUPOOL, "up", "--simulate", "1xH100-80GB", "--node-name", "sim-server"]
        + ["--no-jupyterhub", "--workers", "0", "--port", str(port), "--data-dir", str(tmp)],
        env=env,
        stdout=open(out / "up.log", "w"),  # noqa: SIM115 - lives as long as the process
        stderr=subprocess.STDOUT,
    )
    worker = None
    checks: dict[str, bool] = {}
    try:
        wait(lambda: httpx.get(f"{url}/healthz").status_code == 200, "gpupool up")
        r = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
        h = {"Authorization": f"Bearer {r.json()['token']}"}
        secret = httpx.post(f"{url}/api/v1/nodes/{NODE}/tokens", headers=h).json()["token"]
        ready = tmp / "ready"
        worker = subprocess.Popen(
            [sys.executable, "bench/telemetry_gpu_worker.py", "--mem-gib", "2"]
            + ["--seconds", "120", "--ready", str(ready)],
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=smi[0], GPUPOOL_WORKLOAD_ID="w-agentcheck"),
        )
        wait(ready.exists, "the PyTorch worker")
        agent = subprocess.run(
            [*GPUPOOL, "agent", "--once", "--url", url, "--node", NODE],
            env=dict(os.environ, GPUPOOL_NODE_TOKEN=secret),
            capture_output=True,
            text=True,
            timeout=120,
        )
        (out / "agent.log").write_text(agent.stdout + agent.stderr)
        checks["agent exits 0"] = agent.returncode == 0
        node = httpx.get(f"{url}/api/v1/nodes/{NODE}", headers=h).json()
        t = node.get("telemetry") or {}
        gpus = {g["uuid"]: g for g in t.get("gpus", [])}
        checks["every GPU reported"] = set(gpus) == set(smi)
        checks["not simulated"] = t.get("simulated") is False
        checks["utilization and memory read"] = all(
            g["util_gpu"] is not None and g["memory_used_mib"] for g in gpus.values()
        )
        procs = [p for p in t.get("processes", []) if p["pid"] == worker.pid]
        checks["worker reported on GPU 0"] = bool(procs) and procs[0]["gpu_uuid"] == smi[0]
        checks["worker's workload marker"] = bool(procs) and procs[0]["workload_id"] == (
            "w-agentcheck"
        )
        checks["worker's memory >= 2 GiB"] = bool(procs) and (procs[0]["memory_mib"] or 0) >= 2048
        metrics = httpx.get(f"{url}/metrics").text
        checks["DCGM series with the node name"] = f'Hostname="{NODE}"' in metrics
        (out / "agent_gpu_check.json").write_text(
            json.dumps({"checks": checks, "node": node}, indent=2) + "\n"
        )
    finally:
        if worker is not None:
            worker.kill()
        up.terminate()
        up.wait(60)
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if checks and all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
