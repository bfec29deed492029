"""`gpupool up --engine slurm` as a real process over the real test Slurm: a job submitted
through the API runs in Slurm under the tenant's account as the member's Unix account, and
after `kill -9` of gpupool a new `gpupool up` adopts it and submits nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from tests.slurm.conftest import sh
from tests.support import free_port, wait_for

GPUPOOL = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]
PASSWORD = "slurm e2e password"
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


class Up:
    def __init__(self, data_dir: Path, out: Path, port: int) -> None:
        env = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD, PYTHONUNBUFFERED="1")
        env.pop("GPUPOOL_DATABASE_URL", None)
        self.proc = subprocess.Popen(
            [*GPUPOOL, "up", "--engine", "slurm", "--data-dir", str(data_dir), "--port",
             str(port), "--no-jupyterhub", "--workers", "0", "--slurm-output-dir", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Uvicorn running on" in line:
                self.ready.set()
        self.ready.set()

    def wait_ready(self) -> None:
        assert self.ready.wait(60) and self.proc.poll() is None, "".join(self.lines)


def test_up_engine_slurm_runs_and_adopts_after_kill_9(slurm, tmp_path):
    out = Path(tempfile.mkdtemp(prefix="gpupool-slurm-up-"))
    data, port = tmp_path / "data", free_port()
    up = Up(data, out, port)
    wid = None
    try:
        up.wait_ready()
        r = httpx.post(
            f"{up.url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD}
        )
        h = {"Authorization": f"Bearer {r.json()['token']}"}
        assert (
            httpx.patch(
                f"{up.url}/api/v1/users/admin", headers=h, json={"unix_user": "slann"}
            ).status_code
            == 200
        )
        r = httpx.post(
            f"{up.url}/api/v1/tenants", headers=h, json={"name": "e2e", "quota": {"limit": 2}}
        )
        assert r.status_code == 201, r.text
        r = httpx.post(
            f"{up.url}/api/v1/workloads", headers=h,
            json={"gpus": 1, "command": ["sleep", "300"], "tenant": "e2e"},
        )  # fmt: skip
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        name = f"gpupool-{wid}"

        def in_slurm() -> str:
            return sh("squeue", "-h", "-t", "all", "--name", name, "-o", "%i %T %a %u").strip()

        wait_for(lambda: in_slurm().endswith("RUNNING gp.e2e slann"), what="running in Slurm")
        job_id = in_slurm().split()[0]
        up.proc.send_signal(signal.SIGKILL)
        up.proc.wait(30)
        again = Up(data, out, port)
        up = again
        again.wait_ready()
        r = httpx.post(
            f"{up.url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD}
        )
        h = {"Authorization": f"Bearer {r.json()['token']}"}
        wait_for(
            lambda: (
                httpx.get(f"{up.url}/api/v1/workloads/{wid}", headers=h).json()["state"]
                == "running"
            ),
            what="adopted as running",
        )
        assert in_slurm().split("\n") == [f"{job_id} RUNNING gp.e2e slann"]  # once
        httpx.delete(f"{up.url}/api/v1/workloads/{wid}", headers=h)
        wait_for(
            lambda: (
                httpx.get(f"{up.url}/api/v1/workloads/{wid}", headers=h).json()["state"]
                == "cancelled"
            ),
            what="cancelled",
        )
    finally:
        if wid:
            subprocess.run(["scancel", "--name", f"gpupool-{wid}"], check=False)
        if up.proc.poll() is None:
            up.proc.send_signal(signal.SIGINT)
            up.proc.wait(60)
