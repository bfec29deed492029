"""Real-GPU check (issue 13, item 10): gpupool's own `nvidia-cuda-mps-server` is not reported
as `telemetry.unowned_on_allocated` on a shared GPU.

    python bench/mps_false_alarm_gpu.py OUT_DIR      # on a GPU machine, as root, MPS installed

Starts `gpupool up --mps on` on the real GPUs (single-user; jobs as `nobody`), makes GPU 0
`shared`, runs two fractional jobs that hold a CUDA context under MPS (bench/gpu_probe.py,
copied to a world-readable directory), lets telemetry sample for 30 s, then checks the
events: no `telemetry.unowned_on_allocated` names an `nvidia-cuda-mps-server` pid, and one
such server exists. Prints a JSON summary (also OUT_DIR/mps_false_alarm.json); exit 0 on pass.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

PASSWORD = "mps-check-password"
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(pred, timeout: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = pred()
        except httpx.TransportError:  # not listening yet
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def main(out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpupool-mps-check-", dir="/tmp"))
    work.chmod(0o755)
    probe = work / "gpu_probe.py"
    shutil.copy(HERE / "gpu_probe.py", probe)
    probe.chmod(0o644)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    port = free_port()
    env = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD)
    env.pop("GPUPOOL_DATABASE_URL", None)
    cmd = [sys.executable, "-c", "from gpupool.cli.main import run; run()", "up", "--mps", "on"]
    cmd += ["--data-dir", str(work / "data"), "--port", str(port), "--no-jupyterhub"]
    cmd += ["--workers", "0", "--user-mode", "single-user", "--jobs-account", "nobody"]
    log = open(out_dir / "up.log", "w")  # noqa: SIM115 - closed below
    up = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    result: dict[str, object] = {}
    try:
        wait(
            lambda: (
                httpx.get(f"{url}/readyz", timeout=2).status_code == 200
                if up.poll() is None
                else sys.exit(f"gpupool up exited; see {out_dir}/up.log")
            ),
            120,
            "gpupool up",
        )
        tok = httpx.post(
            f"{url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD}
        ).json()["token"]
        h = {"Authorization": f"Bearer {tok}"}
        gpus = httpx.get(f"{url}/api/v1/gpus", headers=h).json()
        gpus = gpus["items"] if isinstance(gpus, dict) else gpus
        uuid = sorted(gpus, key=lambda g: g["index"])[0]["uuid"]
        r = httpx.patch(f"{url}/api/v1/gpus/{uuid}", headers=h, json={"sharing": "shared"})
        r.raise_for_status()
        job = [python, str(probe), "--alloc-mib", "512", "--hold-s", "60"]
        ids = []
        for _ in range(2):
            r = httpx.post(
                f"{url}/api/v1/workloads",
                headers=h,
                json={
                    "gpu_fraction": 0.25,
                    "gpu_memory_mib": 4096,
                    "command": job,
                    "tenant": "default",
                },
            )
            r.raise_for_status()
            ids.append(r.json()["id"])
        wait(
            lambda: all(
                httpx.get(f"{url}/api/v1/workloads/{w}", headers=h).json()["state"] == "running"
                for w in ids
            ),
            120,
            "both jobs running",
        )
        time.sleep(30)  # several telemetry passes (5 s apart) while both hold the GPU
        servers = [
            p.pid
            for p in psutil.process_iter(["name", "cmdline"])
            if "nvidia-cuda-mps-server" in " ".join(p.info["cmdline"] or [p.info["name"]])
        ]
        events = httpx.get(
            f"{url}/api/v1/events", headers=h, params={"kind": "telemetry.", "limit": 1000}
        ).json()
        events = events["items"] if isinstance(events, dict) else events
        unowned = [e for e in events if e.get("kind") == "telemetry.unowned_on_allocated"]
        false_alarms = [
            e for e in unowned if set((e.get("data") or {}).get("pids", [])) & set(servers)
        ]
        enforcement = [
            httpx.get(f"{url}/api/v1/workloads/{w}", headers=h).json()["allocation"]["shares"][0][
                "enforcement"
            ]
            for w in ids
        ]
        result = {
            "gpu": uuid,
            "mps_servers": servers,
            "enforcement": enforcement,
            "unowned_events": [e.get("message") for e in unowned],
            "false_alarms": len(false_alarms),
            "passed": bool(servers) and not false_alarms and enforcement == ["mps", "mps"],
        }
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
        log.close()
    print(json.dumps(result, indent=1))
    (out_dir / "mps_false_alarm.json").write_text(json.dumps(result, indent=1))
    return 0 if result.get("passed") else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/mps_false_alarm")))
