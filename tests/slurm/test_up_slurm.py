"""`gpupool up --engine slurm` as a real process over the real test Slurm: a job submitted
through the API runs in Slurm under the tenant's account as the member's Unix account, and
after `kill -9` of gpupool a new `gpupool up` adopts it and submits nothing twice."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.slurm.conftest import sh
from tests.support import GpupoolUp, end_process, free_port, wait_for

PASSWORD = "slurm e2e password"
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def up_slurm(data_dir: Path, out: Path, port: int) -> GpupoolUp:
    """A real `gpupool up --engine slurm` over the test Slurm."""
    return GpupoolUp(
        ["--engine", "slurm", "--data-dir", str(data_dir), "--no-jupyterhub", "--workers",
         "0", "--slurm-output-dir", str(out)],
        port, PASSWORD,
    )  # fmt: skip


def test_up_engine_slurm_runs_and_adopts_after_kill_9(slurm, tmp_path):
    out = Path(tempfile.mkdtemp(prefix="gpupool-slurm-up-"))
    data, port = tmp_path / "data", free_port()
    up = up_slurm(data, out, port)
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
        again = up_slurm(data, out, port)
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
        end_process(up.proc)


def _login(url: str) -> dict[str, str]:
    r = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
    return {"Authorization": f"Bearer {r.json()['token']}"}


def test_kill_9_mid_traffic_loses_nothing_and_submits_nothing_twice(slurm, tmp_path):
    """A client submits a stream of jobs (each with an Idempotency-Key, retried until
    answered); `gpupool up --engine slurm` is killed with SIGKILL in the middle and
    restarted. Every submission is there once, every one runs once in Slurm."""
    out = Path(tempfile.mkdtemp(prefix="gpupool-slurm-up-"))
    data, port = tmp_path / "data", free_port()
    ups = [up_slurm(data, out, port)]
    keys = [f"traffic-{i}" for i in range(10)]
    answered: dict[str, str] = {}
    tenant = "traffic"
    try:
        ups[0].wait_ready()
        h = _login(ups[0].url)
        assert httpx.patch(
            f"{ups[0].url}/api/v1/users/admin", headers=h, json={"unix_user": "slann"}
        ).status_code == 200  # fmt: skip
        r = httpx.post(
            f"{ups[0].url}/api/v1/tenants", headers=h, json={"name": tenant, "quota": {"limit": 2}}
        )
        assert r.status_code == 201, r.text
        url = ups[0].url

        def client() -> None:  # submits in order; retries a key until answered
            for key in keys:
                while key not in answered:
                    try:
                        r = httpx.post(
                            f"{url}/api/v1/workloads",
                            headers={**h, "Idempotency-Key": key},
                            json={"gpus": 1, "command": ["sleep", "2"], "tenant": tenant},
                            timeout=10,
                        )
                    except httpx.HTTPError:
                        time.sleep(0.2)  # gpupool is down: try again (a retry pause)
                        continue
                    if r.status_code in (200, 201):
                        answered[key] = r.json()["id"]

        submitter = threading.Thread(target=client, daemon=True)
        submitter.start()
        wait_for(lambda: len(answered) >= 4, what="four submissions answered")
        ups[0].proc.send_signal(signal.SIGKILL)  # mid-traffic: work queued, starting, running
        ups[0].proc.wait(30)
        ups.append(up_slurm(data, out, port))
        ups[1].wait_ready()
        submitter.join(300)
        assert len(answered) == len(keys)
        h = _login(url)

        def all_done() -> list[dict] | None:
            ws = httpx.get(
                f"{url}/api/v1/workloads", params={"tenant": tenant, "limit": 100}, headers=h
            ).json()
            return ws if all(x["state"] == "succeeded" for x in ws) else None

        # admitted work whose sbatch the kill prevented is requeued after the reconciler's
        # launch grace (60 s), then runs: allow for that on a loaded machine
        ws = wait_for(all_done, what="every workload to succeed", timeout=300)
        assert sorted(x["id"] for x in ws) == sorted(answered.values())  # each once, none lost
        for wid in answered.values():
            # slurmctld hands finished jobs to slurmdbd asynchronously, and on a loaded 2-core
            # machine its agent queue has taken over a minute: wait for the record
            runs = wait_for(
                lambda w=wid: sh(
                    "sacct", "-n", "-X", "-P", "--name", f"gpupool-{w}", "-o", "JobID,State"
                ).strip(),
                what=f"sacct's record of gpupool-{wid}",
                timeout=180,
            )
            assert len(runs.split()) == 1, (wid, runs)  # one Slurm job: never submitted twice
            assert runs.split("|")[1].strip() == "COMPLETED"
    finally:
        for wid in answered.values():
            subprocess.run(["scancel", "--name", f"gpupool-{wid}"], check=False)
        for up in ups:
            end_process(up.proc)
