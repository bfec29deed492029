"""The Slurm executor's decisions over a scripted Slurm (a stand-in for subprocess.run that
answers squeue/sacct from a dict and records every command): no Slurm needed, clock
injected. The real-Slurm tests (test_slurm_engine.py) check the same paths end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import subprocess
from pathlib import Path

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Request, Share, Workload, WorkloadKind
from gpupool.engines.common.accounts import default_jobs_account
from gpupool.engines.common.executor import ExecState
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.executor import SlurmExecutor


class FakeSlurm:
    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.calls: list[list[str]] = []
        self.scripts: list[str | None] = []
        self.next_id = 100

    def __call__(self, args, input=None, **kw):  # noqa: A002, ANN001, ANN003, ANN204
        self.calls.append(list(args))
        if args[0] == "sbatch":
            self.scripts.append(input)
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


def test_a_stop_marks_the_job_in_slurmctld_before_it_signals(tmp_path):
    """A TERM reaches only a batch script that already runs: the mark, made first, stops one
    that starts later (jobscript.START_GUARD). A pending job is just cancelled."""
    slurm, _, ex = make(tmp_path)
    start(ex)
    start(ex, "w-2")
    slurm.set("w-1", job_state="RUNNING", start_time=1000)
    ex.stop("w-1", "cancelled", grace_s=10)
    ex.stop("w-2", "cancelled", grace_s=10)
    mark = ["scontrol", "update", "JobId=101", "Comment=gpupool:w-1 stopped-by-gpupool"]
    term = ["scancel", "--signal=TERM", "--full", "101"]
    assert mark in slurm.calls and slurm.calls.index(mark) < slurm.calls.index(term)
    assert ["scancel", "102"] in slurm.calls  # pending: cancelled, never started
    assert not [c for c in slurm.calls if c[0] == "scontrol" and "JobId=102" in c]
    script = slurm.scripts[0] or ""
    assert script.splitlines()[1].startswith('case "$(squeue -h -j "$SLURM_JOB_ID" -o %k')


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


def test_a_restarted_engine_never_marks_gpus_gpupool_holds_as_taken(output_dir):
    """After a restart the executor knows none of its jobs' GPUs; the store's allocations
    (EngineEnv.held) keep a plain job's GPUs off gpupool's own."""
    from gpupool.domain import GPUHealth, OutsideUse
    from gpupool.engines.common.engine import EngineEnv
    from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions

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
        SlurmOptions(output_dir=output_dir, per_user=False), cli=CLI("/x", runner=runner)
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


def _gang(
    ex: SlurmExecutor, wid: str = "g-1", nodes: int = 2, per: int = 4, env: dict | None = None
) -> Allocation:
    shares = tuple(
        Share(f"n{k}", i, f"slurm-n{k}-gpu{i}", 1000, 81920)
        for k in range(1, nodes + 1)
        for i in range(per)
    )
    ex.gpu_types.update({s.gpu_uuid: "h100" for s in shares})
    w = Workload(
        wid, "lab", "ann", Request(gpus=nodes * per, nodes=nodes), command=("python", "t.py", "a b")
    )
    a = Allocation(wid, "n1", shares, since=0.0)
    ex.start(w, a, env=env)
    return a


def test_a_gang_is_one_job_on_the_chosen_nodes_with_gpus_per_node(tmp_path):
    slurm, _, ex = make(tmp_path)
    _gang(ex, nodes=3)
    (sbatch,) = [c for c in slurm.calls if c[0] == "sbatch"]
    assert "--nodes=3" in sbatch and "--nodelist=n1,n2,n3" in sbatch
    assert "--ntasks-per-node=1" in sbatch and "--gres=gpu:h100:4" in sbatch  # per node
    script = slurm.scripts[0] or ""
    assert "srun --kill-on-bad-exit=1 --ntasks-per-node=1" in script
    assert "NNODES=3" in script and "WORLD_SIZE=12" in script and "NPROC_PER_NODE=4" in script


def test_the_gang_script_runs_the_command_once_per_node_with_its_rank(tmp_path):
    """The batch script under a stand-in srun that runs its command for SLURM_NODEID 0 and 1,
    as Slurm does on two nodes: each gets NODE_RANK and the shared variables. The job's PATH
    (declared here) comes from the script itself: Slurm starts it with SLURM_* only."""
    slurm, _, ex = make(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    a = _gang(ex, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    script = (slurm.scripts[0] or "").replace('"python" ', "").replace("python ", "")
    (bin_dir / "srun").write_text(
        "#!/bin/sh\n"
        'while [ "${1#--}" != "$1" ]; do shift; done\n'  # drop srun's own options
        'for id in 0 1; do SLURM_NODEID=$id "$@" || exit $?; done\n'
    )
    (bin_dir / "t.py").write_text(
        '#!/bin/sh\necho "rank=$NODE_RANK of=$NNODES master=$MASTER_ADDR:$MASTER_PORT '
        'world=$WORLD_SIZE gpus=$GPUS_PER_NODE arg=$1"\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {"SLURMD_NODENAME": "node0"}
    out = subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        f"rank={r} of=2 master=node0:29500 world=8 gpus=4 arg=a b" for r in (0, 1)
    ], out
    assert a.nodes == ("n1", "n2")


def test_a_gang_jobs_state_is_the_whole_jobs(tmp_path):
    slurm, clock, ex = make(tmp_path)
    _gang(ex)
    slurm.set("g-1", job_state="RUNNING", state_reason="None")
    assert ex.poll("g-1").state is ExecState.RUNNING
    slurm.set("g-1", job_state="FAILED", exit_code=256)
    st = ex.poll("g-1")
    assert st.state is ExecState.FAILED and st.exit_code == 1


def test_where_every_job_shares_one_account_the_hub_serves_the_first_admin_only(tmp_path):
    """Review F2b on Slurm: jobs and notebooks of all users as one account (not per-user)
    could change each other's notebook homes, so other users' hub notebooks are refused
    (gpupool.server.services.notebooks, which reads `one_account`)."""
    from types import SimpleNamespace

    from gpupool.server.services.notebooks import one_account_refusal

    _, clock, ex = make(tmp_path)
    assert ex.one_account
    ctx = SimpleNamespace(executor=ex, hub=True, notebook_owner="admin")
    nb = Workload("w-1", "lab", "ann", Request(gpus=1), kind=WorkloadKind.NOTEBOOK)
    assert "serves only 'admin'" in (one_account_refusal(ctx, nb) or "")  # type: ignore[arg-type]
    assert one_account_refusal(ctx, dataclasses.replace(nb, owner="admin")) is None  # type: ignore[arg-type]
    per_user = SlurmExecutor(
        SlurmCLI("/dev/null", runner=FakeSlurm()),
        clock,
        tmp_path / "o2",
        account_of=lambda t: "gp." + t,
        per_user=True,
    )
    assert not per_user.one_account
