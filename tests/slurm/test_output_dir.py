"""The jobs' output directory (engines/slurm/output.py): a default the jobs' accounts can
reach, refused at start-up when they cannot, and Slurm's reason in a failed workload's
message. No Slurm needed (a stand-in answers); test_slurm_engine.py runs a real one."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.engines.common.engine import EngineEnv, EngineError
from gpupool.engines.common.executor import ExecState
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.engines.slurm.output import (
    SHARED_DEFAULT,
    blocked_for,
    default_output_dir,
    launch_failure,
    unreachable,
)
from tests.slurm.test_executor_logic import make, start

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as other accounts only as root")


def _engine(out: Path | None) -> SlurmEngine:
    def runner(args, **kw):  # noqa: ANN001, ANN003, ANN202
        if args[0] == "sinfo":
            out = "slurm 22.05.8" if "--version" in args else json.dumps({"nodes": []})
        elif args[0] == "squeue":
            out = json.dumps({"jobs": []})
        else:
            out = ""
        return subprocess.CompletedProcess(args, 0, out, "")

    return SlurmEngine(SlurmOptions(output_dir=out, per_user=False), cli=SlurmCLI(runner=runner))


def test_as_root_the_default_is_a_directory_every_account_can_reach(tmp_path):
    data = tmp_path / "data"  # gpupool's own data directory: 0700 under root's home
    assert default_output_dir(data, as_root=True) == SHARED_DEFAULT
    assert not str(SHARED_DEFAULT).startswith(str(data))
    assert unreachable(SHARED_DEFAULT.parent.parent) is None  # /var/lib: everyone enters
    # not root: jobs run as gpupool's own account, beside its data directory
    assert default_output_dir(data, as_root=False) == tmp_path / "gpupool-slurm-output"


@as_root
def test_an_output_directory_the_jobs_cannot_reach_is_refused_at_start_with_what_to_do():
    base = Path(tempfile.mkdtemp(prefix="gpupool-h-", dir="/tmp"))  # 0700, as the data dir
    try:
        with pytest.raises(EngineError) as e:
            _engine(base / "out").open(EngineEnv(ManualClock(0.0)))
        msg = str(e.value)
        assert f"{base} is 0700" in msg and "--slurm-output-dir" in msg and "o+x" in msg
        base.chmod(0o711)
        _engine(base / "out").open(EngineEnv(ManualClock(0.0)))  # reachable: it starts
        assert stat.S_IMODE((base / "out").stat().st_mode) == 0o711  # nobody lists it
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_slurms_reason_is_in_the_workloads_message(tmp_path):
    slurm, _, ex = make(tmp_path)
    start(ex)
    slurm.set("w-1", job_state="TIMEOUT", exit_code=0, state_reason="TimeLimit", end_time=1)
    st = ex.poll("w-1")
    assert st.state is ExecState.FAILED
    assert st.message == "Slurm job 101 timeout (Slurm's reason: TimeLimit)"
    start(ex, "w-2")
    slurm.set("w-2", job_state="FAILED", exit_code=256, state_reason="NonZeroExitCode")
    assert ex.poll("w-2").message == "Slurm job 102 failed"  # the exit code says it all


def test_a_job_slurm_could_not_start_says_which_file_and_directory_blocked_it(tmp_path):
    slurm, _, ex = make(tmp_path)
    start(ex)
    slurm.set("w-1", job_state="FAILED", exit_code=53, state_reason="JobLaunchFailure")
    slurm.set("w-1", batch_host="n1")
    st = ex.poll("w-1")
    assert st.state is ExecState.FAILED and st.exit_code == 128 + 53
    out = tmp_path / "out" / "w-1.out"
    assert st.message.startswith("Slurm job 101 failed: Slurm could not start it")
    assert str(out) in st.message and "JobLaunchFailure" in st.message
    # what gpupool can see itself: the directory that keeps the account out
    private = Path(tempfile.mkdtemp(dir="/tmp"))  # 0700, its parents open
    try:
        nobody = 65534
        why = blocked_for(private / "x.out", nobody, set())
        assert why == f"it may not enter {private} (0700)"
        msg = launch_failure("7", "n1", private / "x.out", "nobody", nobody)
        assert msg == (
            "Slurm job 7 failed: Slurm could not start it (JobLaunchFailure): the job's "
            f"account nobody could not open its output file {private}/x.out: {why}"
        )
        private.chmod(0o711)
        assert blocked_for(private / "x.out", nobody, set()) is None
    finally:
        private.rmdir()
