"""The Slurm executor's decisions over a scripted Slurm (a stand-in for subprocess.run that
answers squeue/sacct from a dict and records every command): no Slurm needed, clock
injected. The real-Slurm tests (test_slurm_engine.py) check the same paths end to end."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Request, Share, Workload
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.executor import SlurmExecutor
from gpupool.executors.accounts import default_jobs_account
from gpupool.executors.base import ExecState


class FakeSlurm:
    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.calls: list[list[str]] = []
        self.next_id = 100

    def __call__(self, args, input=None, **kw):  # noqa: A002, ANN001, ANN003, ANN204
        self.calls.append(list(args))
        out = ""
        if args[0] == "squeue":
            out = json.dumps({"jobs": list(self.jobs.values()), "errors": []})
        elif args[0] == "sacct":
            out = json.dumps({"jobs": [], "errors": []})
        elif args[0] == "sbatch":
            self.next_id += 1
            name = next(a.split("=", 1)[1] for a in args if a.startswith("--job-name="))
            self.jobs[name] = {
                "job_id": self.next_id,
                "name": name,
                "job_state": "PENDING",
                "state_reason": "Priority",
                "user_name": "me",
            }
            out = f"{self.next_id}\n"
        return subprocess.CompletedProcess(args, 0, out, "")

    def set(self, wid: str, **fields) -> None:
        self.jobs[f"gpupool-{wid}"].update(fields)


def make(tmp_path: Path):  # noqa: ANN201
    slurm, clock = FakeSlurm(), ManualClock(1_000.0)
    ex = SlurmExecutor(
        SlurmCLI("/dev/null", runner=slurm),
        clock,
        tmp_path / "out",
        account_of=lambda t: "gp." + t,
        per_user=False,
        refresh_s=-1,  # read squeue on every poll
    )
    return slurm, clock, ex


def start(ex: SlurmExecutor, wid: str = "w-1", gpus: int = 2) -> None:
    shares = tuple(Share("n1", i, f"slurm-n1-gpu{i}", 1000, 81920) for i in range(gpus))
    ex.gpu_types.update({s.gpu_uuid: "h100" for s in shares})
    w = Workload(wid, "lab", "ann", Request(gpus=gpus), command=("python", "t.py"))
    ex.start(w, Allocation(wid, "n1", shares, since=0.0))


def test_submission_asks_for_the_node_type_count_and_account(tmp_path):
    slurm, _, ex = make(tmp_path)
    start(ex)
    (sbatch,) = [c for c in slurm.calls if c[0] == "sbatch"]
    assert "--gres=gpu:h100:2" in sbatch and "--nodelist=n1" in sbatch
    assert "--account=gp.lab" in sbatch and "--job-name=gpupool-w-1" in sbatch
    uids = [a for a in sbatch if a.startswith("--uid=")]
    if os.geteuid() == 0:  # single-user as root: one unprivileged jobs account, never root
        assert len(uids) == 1 and uids[0] != "--uid=0", sbatch
        assert uids[0] == f"--uid={pwd.getpwnam(default_jobs_account()).pw_uid}"
    else:  # the server's own (unprivileged) account: no switch
        assert uids == []


def test_pending_past_the_timeout_is_cancelled_and_rejected_with_slurms_reason(tmp_path):
    slurm, clock, ex = make(tmp_path)
    start(ex)
    slurm.set("w-1", state_reason="AssocGrpGRES")
    clock.advance(29)
    st = ex.poll("w-1")
    assert st.state is ExecState.STARTING and "AssocGrpGRES" in st.message
    clock.advance(1)
    st = ex.poll("w-1")
    assert st.state is ExecState.REJECTED and "AssocGrpGRES" in st.message
    assert ["scancel", "101"] in slurm.calls
    assert ex.poll("w-1").state is ExecState.REJECTED  # stays so until started again


def test_stop_signals_then_kills_after_the_grace_on_the_clock(tmp_path):
    slurm, clock, ex = make(tmp_path)
    start(ex)
    slurm.set("w-1", job_state="RUNNING", start_time=1000)
    ex.stop("w-1", "cancelled", grace_s=10)
    assert ["scancel", "--signal=TERM", "--full", "101"] in slurm.calls
    clock.advance(9)
    ex.tick()
    assert not any("--signal=KILL" in c for c in slurm.calls)
    clock.advance(1)
    ex.tick()
    assert ["scancel", "--signal=KILL", "--full", "101"] in slurm.calls
    slurm.set("w-1", job_state="CANCELLED", exit_code=9)
    st = ex.poll("w-1")
    assert st.state is ExecState.FAILED and st.exit_code == 137 and st.stop_reason == "cancelled"


def test_a_new_executor_adopts_by_job_name(tmp_path):
    slurm, clock, ex = make(tmp_path)
    start(ex)
    slurm.set("w-1", job_state="RUNNING")
    again = SlurmExecutor(
        SlurmCLI("/dev/null", runner=slurm),
        clock,
        tmp_path / "out",
        account_of=lambda t: t,
        per_user=False,
    )
    assert [(r.workload_id, r.ref) for r in again.list_running()] == [("w-1", "101")]
    assert again.poll("w-1").state is ExecState.RUNNING
    assert again.poll("w-2").state is ExecState.UNKNOWN


def test_a_restarted_engine_never_marks_gpus_gpupool_holds_as_taken(tmp_path):
    """After a restart the executor knows none of its jobs' GPUs; the store's allocations
    (EngineEnv.held) keep a plain job's GPUs off gpupool's own."""
    from gpupool.domain import GPUHealth, OutsideUse
    from gpupool.engines.base import EngineEnv
    from gpupool.engines.slurm import SlurmEngine, SlurmOptions

    slurm = FakeSlurm()
    node = {"name": "n1", "state": "mixed", "gres": "gpu:h100:4", "cpus": 8, "real_memory": 1}
    plain = {"job_id": 7, "name": "plain", "job_state": "RUNNING", "user_name": "eve",
             "batch_host": "n1", "gres_detail": ["gpu:h100:1(IDX:0)"]}  # fmt: skip
    slurm.jobs["plain"] = plain

    def runner(args, **kw):  # noqa: ANN001, ANN003, ANN202
        if args[0] == "sinfo":
            out = "slurm 22.05.8" if "--version" in args else json.dumps({"nodes": [node]})
            return subprocess.CompletedProcess(args, 0, out, "")
        if args[0] == "sacctmgr":
            return subprocess.CompletedProcess(args, 0, "", "")
        return slurm(args, **kw)

    from gpupool.engines.slurm.cli import SlurmCLI as CLI

    engine = SlurmEngine(
        SlurmOptions(output_dir=tmp_path / "out", per_user=False), cli=CLI("/x", runner=runner)
    )
    engine.open(EngineEnv(ManualClock(0.0), held=lambda: {"slurm-n1-gpu0"}))
    (n1,) = engine.inventory()
    assert all(g.health is GPUHealth.HEALTHY for g in n1.gpus)  # taken, not unhealthy
    taken = [g.uuid for g in n1.gpus if g.outside is not None]
    assert len(taken) == 1 and taken != ["slurm-n1-gpu0"]
    assert n1.gpus[-1].outside == OutsideUse("slurm job 7", "eve")  # the highest free one


def test_a_failing_squeue_does_not_stop_the_pass_and_polls_say_so(tmp_path):
    from gpupool.engines.slurm.cli import SlurmError

    synced = []

    def runner(args, **kw):  # noqa: ANN001, ANN003, ANN202
        return subprocess.CompletedProcess(args, 1, "", "slurm_load_jobs error: timed out")

    ex = SlurmExecutor(
        SlurmCLI("/x", runner=runner), ManualClock(0.0), tmp_path / "o",
        account_of=str, per_user=False, sync=lambda: synced.append(1),
    )  # fmt: skip
    ex.tick()  # no exception: the reconciler goes on
    assert synced == [1]
    try:
        ex.poll("w-1")
    except SlurmError as e:
        assert "timed out" in str(e)
    else:
        raise AssertionError("a poll without squeue must raise, not guess")
