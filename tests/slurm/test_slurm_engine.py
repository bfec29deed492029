"""The slurm engine against a real Slurm: Slurm's own view (`sacct`, `squeue`, `sacctmgr`)
is the truth each test holds gpupool to."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpupool.domain import GPUHealth
from gpupool.store import EventRepo, NodeRepo, WorkloadRepo
from tests.slurm.conftest import sacct, sh
from tests.support import ServedApp, wait_for

NODE = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
RUNNING = {"running"}
pytestmark = pytest.mark.slurm


def test_a_job_runs_under_the_tenants_account_with_its_gpus(make_world):
    w = make_world()
    wid = w.submit(
        "slann", gpus=2, command=["sh", "-c", 'echo "CVD=$CUDA_VISIBLE_DEVICES"; id -un']
    )["id"]
    w.schedule()
    done = w.settle(wid, {"succeeded", "failed", "lost"})
    assert done["state"] == "succeeded", done
    job = sacct(w.job_id(wid))
    assert job["account"] == "gp.lab" and job["user"] == "slann"
    assert job["name"] == f"gpupool-{wid}"
    gres = [t for t in job["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu"]
    assert gres and gres[0]["count"] == 2
    log = w.engine.executor.logs(wid)
    cvd = log.split("CVD=")[1].split()[0]
    assert len(cvd.split(",")) == 2, log  # Slurm bound two GPUs
    assert "slann" in log.splitlines()  # the member's own Unix account, not root


def test_tenants_are_slurm_accounts_with_a_gpu_backstop(make_world):
    w = make_world()
    w.engine.sync_accounts(force=True)
    rows = sh(
        "sacctmgr", "-n", "-P", "list", "association", "format=Account,User,GrpTRES,ParentName"
    )
    accounts = {r.split("|")[0]: r.split("|") for r in rows.splitlines() if r.split("|")[1] == ""}
    assert accounts["gp.lab"][2] == "gres/gpu=2"  # lab's limit: 2 GPUs
    assert accounts["gp.other"][2] == "gres/gpu=4"


def test_work_over_the_limit_waits_in_gpupools_queue_with_a_reason(make_world):
    w = make_world()
    ids = [w.submit("slann", gpus=1, command=["sleep", "60"])["id"] for _ in range(3)]
    w.schedule()
    for wid in ids[:2]:
        w.settle(wid, RUNNING)
    w.reconcile()  # records what Slurm enforces: this Slurm constrains no devices
    shares = w.get("slann", ids[0])["allocation"]["shares"]
    assert [s["enforcement"] for s in shares] == ["none"], shares  # never "policed" here
    assert w.get("slann", ids[2])["state"] == "pending"
    queue = w.client.get("/api/v1/queue", headers=w.h("slann")).json()
    (entry,) = [e for e in queue if e["workload"]["id"] == ids[2]]
    assert "limit" in entry["reason"], entry  # gpupool says why it waits
    assert not subprocess.run(
        ["squeue", "-h", "--name", f"gpupool-{ids[2]}"], capture_output=True, text=True
    ).stdout.strip()  # never submitted to Slurm


def test_a_cancel_scancels_the_slurm_job(make_world):
    w = make_world()
    wid = w.submit("slann", gpus=1, command=["sleep", "300"])["id"]
    w.schedule()
    w.settle(wid, RUNNING)
    job_id = w.job_id(wid)
    r = w.client.delete(f"/api/v1/workloads/{wid}", headers=w.h("slann"))
    assert r.status_code in (200, 202), r.text
    w.settle(wid, {"cancelled"})
    job = sacct(job_id)  # SIGTERM ended it: Slurm records the signal
    assert job["state"]["current"] in ("CANCELLED", "FAILED"), job["state"]
    assert (
        job["exit_code"].get("signal", {}).get("signal_id") == 15
        or job["state"]["current"] == "CANCELLED"
    ), job["exit_code"]


def test_a_cancel_before_slurmd_starts_the_script_still_ends_the_job(make_world):
    """Slurm says RUNNING once it allocated the job; slurmd starts the batch script later
    (the prolog, the launch). A TERM sent in between reaches nothing; the job must still end
    then, with no wait for gpupool's grace (the clock never moves here)."""
    hold = os.environ.get("GPUPOOL_TEST_SLURM_HOLD")
    if not hold:
        pytest.skip("this Slurm has no hold prolog (scripts/services.sh start_slurm sets one)")
    w = make_world()
    wid = w.submit("slann", gpus=1, command=["sh", "-c", "echo COMMAND-RAN; sleep 300"])["id"]
    Path(hold).touch()  # the prolog holds the job's start: allocated, script not started
    try:
        w.schedule()
        w.settle(wid, RUNNING)
        job_id = w.job_id(wid)
        w.client.delete(f"/api/v1/workloads/{wid}", headers=w.h("slann"))
        w.reconcile()  # TERM sent while the prolog runs: nothing to deliver it to
        assert sh("squeue", "-h", "-j", job_id, "-o", "%T").strip() == "RUNNING"
    finally:
        Path(hold).unlink(missing_ok=True)
    done = w.settle(wid, {"cancelled"})
    assert done["exit_code"] == 143, done  # TERM, not gpupool's KILL
    log = w.engine.executor.logs(wid)
    assert "COMMAND-RAN" not in log and "stopped before it started" in log, log
    assert sacct(job_id)["state"]["current"] in ("CANCELLED", "FAILED")


def test_a_job_that_cannot_open_its_output_fails_saying_so(make_world, output_dir):
    """slurmd opens the output file as the job's account before the script runs; when it
    cannot, Slurm only says JobLaunchFailure (the cause is in slurmd's log): gpupool says
    which file and which directory kept the account out."""
    w = make_world()
    output_dir.chmod(0o700)  # after start-up: the check there would refuse it
    wid = w.submit("slann", gpus=1, command=["true"])["id"]
    w.schedule()
    done = w.settle(wid, {"failed", "succeeded", "lost"})
    assert done["state"] == "failed", done
    assert done["reason"] == (
        f"the work failed: Slurm job {w.job_id(wid)} failed: Slurm could not start it "
        "(JobLaunchFailure): the job's account slann could not open its output file "
        f"{output_dir}/{wid}.out: it may not enter {output_dir} (0700)"
    ), done


def test_a_restarted_gpupool_adopts_the_running_job_and_starts_nothing_twice(make_world):
    first = make_world()
    wid = first.submit("slann", gpus=1, command=["sleep", "300"])["id"]
    first.schedule()
    first.settle(wid, RUNNING)
    job_id = first.job_id(wid)
    second = make_world()  # a new process over the same database: first's memory is gone
    report = second.reconcile()
    assert wid in report.adopted
    second.schedule()
    assert second.get("slann", wid)["state"] == "running"
    ids = sh("squeue", "-h", "-t", "all", "-o", "%i", "--name", f"gpupool-{wid}").split()
    assert ids == [job_id]  # one Slurm job, submitted once
    # and it still stops through the new process
    second.client.delete(f"/api/v1/workloads/{wid}", headers=second.h("slann"))
    second.settle(wid, {"cancelled"})


def test_a_plain_sbatch_jobs_gpus_are_taken_and_pending_slurm_work_is_requeued(make_world):
    w = make_world()
    foreign = sh(
        "sbatch",
        "--parsable",
        "--gres=gpu:3",
        "--account=root",
        "--job-name=not-gpupool",
        "--output=/dev/null",
        "--wrap",
        "sleep 300",
    ).strip()
    try:
        wait_for(
            lambda: sh("squeue", "-h", "-j", foreign, "-o", "%T").strip() == "RUNNING",
            "the plain job to run",
            timeout=30,
        )
        # gpupool's view of the node is from before that job: it admits 2 GPUs, Slurm has 1
        wid = w.submit("slbob", gpus=2, command=["sleep", "5"])["id"]
        w.schedule()
        st = w.settle(wid, {"starting", "admitted"}, user="slbob")
        assert st["state"] in ("starting", "admitted")
        name = f"gpupool-{wid}"
        wait_for(
            lambda: (
                sh("squeue", "-h", "--name", name, "-o", "%r").strip() == "Resources"
            ),  # Slurm has tried and says why it waits
            "Slurm's reason",
            timeout=30,
        )
        w.clock.advance(31)  # still pending in Slurm 30 s after admission
        back = w.settle(wid, {"pending"}, user="slbob")
        assert "Resources" in back["reason"] and "pending" in back["reason"], back
        assert sacct(w.job_id(wid))["state"]["current"] == "CANCELLED"
        # the inventory now counts the plain job's GPUs as taken (not schedulable)
        w.ctx.loops.get("inventory").run_once()
        with w.ctx.store.read() as s:
            node = NodeRepo(s).get(NODE)
            events = [e for _, e in EventRepo(s).list(kind="slurm.foreign")]
        # taken, not unhealthy: used outside gpupool by the plain job, named with its user
        assert all(g.health is GPUHealth.HEALTHY for g in node.gpus)
        outside = [g for g in node.gpus if g.outside is not None]
        assert len(outside) == 3
        assert {(g.outside.ref, g.outside.user) for g in outside} == {
            (f"slurm job {foreign}", "root")
        }
        assert all(g.outside.since for g in outside)  # Slurm's start time
        assert events and foreign in events[0].message and "root" in events[0].message
        # the API and `gpupool node ls --json` say so
        r = w.client.get(f"/api/v1/nodes/{NODE}", headers=w.h("slbob"))
        api_outside = [g["outside"] for g in r.json()["gpus"] if g["outside"]]
        holders = [(o["ref"], o["user"]) for o in api_outside]
        assert holders == [(f"slurm job {foreign}", "root")] * 3
        listed = _node_ls_json(w)
        (mine,) = [n for n in listed if n["name"] == NODE]
        assert [g["outside"]["ref"] for g in mine["gpus"] if g["outside"]] == [
            f"slurm job {foreign}"
        ] * 3
        assert [g["health"] for g in mine["gpus"]] == ["healthy"] * len(mine["gpus"])
        w.schedule()
        with w.ctx.store.read() as s:
            assert WorkloadRepo(s).get(wid).state.value == "pending"  # 1 GPU left: it waits
        why = w.get("slbob", wid)["pending"]["reason"]  # the scheduler's why-pending
        assert f"is used outside gpupool by slurm job {foreign} (root)" in why, why
        sh("scancel", foreign)  # once the plain job ends, its GPUs are gpupool's again
        wait_for(
            lambda: not sh("squeue", "-h", "-j", foreign, "-t", "running,completing").strip(),
            "the plain job to end",
            timeout=30,
        )
        w.clock.advance(6)
        w.ctx.loops.get("inventory").run_once()
        with w.ctx.store.read() as s:
            gpus = NodeRepo(s).get(NODE).gpus
        assert all(g.health is GPUHealth.HEALTHY and g.outside is None for g in gpus)
        w.schedule()
        w.settle(wid, RUNNING | {"succeeded"}, user="slbob")
    finally:
        subprocess.run(["scancel", foreign], check=False)


def test_work_that_ignores_sigterm_is_killed_after_the_grace(make_world):
    w = make_world()
    script = "trap '' TERM; echo ready; while :; do sleep 1; done"
    wid = w.submit("slann", gpus=1, command=["sh", "-c", script])["id"]
    w.schedule()
    w.settle(wid, RUNNING)
    wait_for(lambda: "ready" in w.engine.executor.logs(wid), "the trap to be set", timeout=30)
    job_id = w.job_id(wid)
    w.client.delete(f"/api/v1/workloads/{wid}", headers=w.h("slann"))
    w.reconcile()
    assert sh("squeue", "-h", "-j", job_id, "-o", "%T").strip() == "RUNNING"  # TERM ignored
    w.clock.advance(w.ctx.settings.stop_grace_s + 1)  # the grace is over on gpupool's clock
    done = w.settle(wid, {"cancelled"})
    assert done["exit_code"] == 137, done  # killed
    job = sacct(job_id)
    assert job["state"]["current"] in ("CANCELLED", "FAILED"), job["state"]


def _node_ls_json(w) -> list[dict]:  # noqa: ANN001
    """`gpupool node ls --json` against `w`'s app, served on loopback."""
    from typer.testing import CliRunner

    from gpupool.cli.main import app as cli

    with ServedApp(w.system.app, lifespan="off") as url:
        env = {"GPUPOOL_URL": url, "GPUPOOL_TOKEN": w.tokens["slbob"], "COLUMNS": "80"}
        r = CliRunner().invoke(cli, ["node", "ls", "--json"], env=env)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)
