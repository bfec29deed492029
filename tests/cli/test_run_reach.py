"""A job whose program its account cannot reach says which path and which account (issue
30, item 1): `gpupool run -- python` printed only "permission denied: python"."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Workload
from gpupool.engines.common.executor import ExecState
from gpupool.engines.local.executor import LocalExecutor
from tests.engines.conftest import end_all, wait_job

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as another account as root")


@pytest.fixture
def private_env() -> Iterator[Path]:
    """A 'virtual environment' only root can enter: /tmp/<dir> 0700 with bin/prog in it."""
    top = Path(tempfile.mkdtemp(prefix="gpupool-venv-", dir="/tmp"))
    (top / "bin").mkdir()
    prog = top / "bin" / "prog"
    prog.write_text("#!/bin/sh\necho ran\n")
    prog.chmod(0o755)
    (top / "bin").chmod(0o755)
    top.chmod(0o700)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_a_program_out_of_the_jobs_accounts_reach_is_named_with_the_account(
    tmp_path, private_env, monkeypatch
):
    monkeypatch.setenv("PATH", f"{private_env}/bin:/usr/bin:/bin")
    ex = LocalExecutor(
        tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user", jobs_account="nobody"
    )
    try:
        for wid, cmd in (("w1", str(private_env / "bin" / "prog")), ("w2", "prog")):
            ex.start(Workload(id=wid, tenant="t", owner="alice", command=(cmd,)), None)
            wait_job(ex, wid)
            st = ex.poll(wid)
            assert (st.state, st.exit_code) == (ExecState.FAILED, 126)
            log = ex.logs(wid)
            assert f"permission denied: {private_env}/bin/prog" in log, log
            assert f"the Unix account nobody cannot search the directory {private_env}" in log
            assert f"chmod o+x {private_env}" in log
        ex.start(Workload(id="w3", tenant="t", owner="alice", command=("no-such-prog",)), None)
        wait_job(ex, "w3")
        assert ex.poll("w3").exit_code == 127
        assert "command not found: no-such-prog (searched PATH=" in ex.logs("w3")
        assert "as nobody" in ex.logs("w3")
    finally:
        end_all(ex)


def test_up_checks_that_notebooks_and_jobs_accounts_can_run_their_programs(private_env):
    """`gpupool up` as root runs python3 and the hub's single-user server as an account
    without special rights, and says what cannot start, with the path, account and fix."""
    from gpupool.engines.local.engine import LocalEngine, LocalOptions

    engine = LocalEngine(LocalOptions(node="n1", user_mode="single-user"))
    (problem,) = engine.reach_problems([str(private_env / "bin" / "prog")])
    assert problem.startswith(f"notebooks cannot start: {private_env}/bin/prog --version")
    assert f"the Unix account nobody cannot search the directory {private_env}" in problem
    assert f"Fix: chmod o+x {private_env}" in problem and "/opt/gpupool" in problem
    assert engine.reach_problems(["/bin/true"]) == []  # reachable: nothing to say
    assert engine.reach_problems(None) == []  # python3 runs as nobody here
