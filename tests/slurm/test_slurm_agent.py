"""Agent attribution by Slurm job on a real Slurm: the agent code reads the real job
processes' `SLURM_JOB_ID` from /proc (no gpupool marker in their environment), reports them
on the node's (simulated: no GPU here) GPUs, and the server maps the Slurm job to its workload;
a plain `sbatch` job's process is outside gpupool even when it claims a workload id."""

from __future__ import annotations

import subprocess

import pytest

from gpupool.agent.attribute import HostAttributor
from gpupool.agent.report import build_report
from gpupool.telemetry.simulated import SimulatedSource
from tests.slurm.conftest import sh
from tests.support import wait_for

NODE = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
pytestmark = pytest.mark.slurm


def job_pid(job_id: str, command: str) -> int:
    """The pid of the job's process running `command` (`scontrol listpids`)."""

    def find() -> int | None:
        out = subprocess.run(
            ["scontrol", "listpids", job_id], capture_output=True, text=True
        ).stdout.split("\n")[1:]
        for line in out:
            if not line.split():
                continue
            pid = int(line.split()[0])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0].endswith(command.encode()):
                        return pid
            except OSError:
                continue
        return None

    return wait_for(find, f"the {command} process of job {job_id}", timeout=30)  # type: ignore[return-value]


def test_agent_processes_are_attributed_by_their_slurm_job(make_world):
    w = make_world()
    wid = w.submit("slann", gpus=1, command=["env", "-u", "GPUPOOL_WORKLOAD_ID", "sleep", "120"])[
        "id"
    ]
    w.schedule()
    w.settle(wid, {"running"})
    mine = job_pid(w.job_id(wid), "sleep")
    plain = sh(
        "sbatch", "--parsable", "--account=root", "--job-name=not-gpupool", "--output=/dev/null",
        f"--export=ALL,GPUPOOL_WORKLOAD_ID={wid}", "--wrap", "exec sleep 120",
    ).strip()  # fmt: skip
    try:
        theirs = job_pid(plain, "sleep")
        w.reconcile()  # one squeue read: the executor knows both jobs
        tags = HostAttributor().tag([mine, theirs])
        assert tags[mine].containers == {"slurm-job": w.job_id(wid)}
        assert tags[mine].workload_id is None
        assert tags[theirs].containers == {"slurm-job": plain}
        assert tags[theirs].workload_id == wid  # a claim
        sim = SimulatedSource("4xH100-80GB", clock=w.clock, hostname=NODE)
        sim.add_process(0, mine, memory_mib=1000)
        sim.add_process(1, theirs, memory_mib=500)
        r = w.client.post(f"/api/v1/nodes/{NODE}/tokens", headers=w.h("root"))
        assert r.status_code == 201, r.text
        body = build_report(sim.snapshot(), tags, interval_s=5.0)
        r = w.client.post(
            f"/api/v1/nodes/{NODE}/report",
            json=body,
            headers={"Authorization": f"Bearer {r.json()['token']}"},
        )
        assert r.status_code == 200, r.text
        node = w.client.get(f"/api/v1/nodes/{NODE}", headers=w.h("root")).json()
        procs = {p["pid"]: p for p in node["telemetry"]["processes"]}
        got = procs[mine]
        assert (got["workload_id"], got["via"]) == (wid, "slurm")
        assert (got["user"], got["tenant"]) == ("slann", "lab")
        assert got["gpu_uuid"] == f"slurm-{NODE}-gpu0"  # on the engine's GPU
        other = procs[theirs]
        assert other["workload_id"] is None and other["slurm_job_id"] == plain
        assert other["via"] in ("unix-user", "none")  # outside gpupool
    finally:
        subprocess.run(["scancel", plain], check=False)
