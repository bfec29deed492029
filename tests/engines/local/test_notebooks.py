"""Notebooks on the local engine (issue 31, item 3): the executor runs the hub's single-user
server itself, as the owner's account, on the granted GPUs, on a free port of 127.0.0.1, and
reports the endpoint once it listens; stop ends it, a new executor adopts it.

The "server" here is a tiny HTTP server of the system's Python (readable by every account,
unlike this machine's own Python under /root) that listens where the hub's
JUPYTERHUB_SERVICE_URL says, as jupyterhub-singleuser does. End to end with a real hub and
jupyterhub-singleuser: tests/jupyterhub/test_hub_e2e.py."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Share, Workload, WorkloadKind
from gpupool.engines.common.executor import ExecState, ExecStatus
from gpupool.engines.local import notebooks
from gpupool.engines.local.executor import LocalExecutor
from tests.support import wait_for

PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin")
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="notebooks run as other accounts: needs root"),
    pytest.mark.skipif(PYTHON is None, reason="no system python3"),
]
#: listens where JUPYTERHUB_SERVICE_URL says, after printing what the notebook got
SERVER = r"""
import os, sys, http.server, urllib.parse as up
u = up.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
print("uid", os.getuid(), "cwd", os.getcwd(), "path", u.path, flush=True)
for k in ("CUDA_VISIBLE_DEVICES", "GPUPOOL_NOTEBOOK_PORT", "JUPYTERHUB_API_TOKEN"):
    print(k, "set" if k == "JUPYTERHUB_API_TOKEN" else os.environ.get(k), flush=True)
http.server.HTTPServer((u.hostname, u.port), http.server.BaseHTTPRequestHandler).serve_forever()
"""
HUB_ENV = {"JUPYTERHUB_SERVICE_URL": "http://:0/user/alice/", "JUPYTERHUB_API_TOKEN": "s3cret"}


def notebook(wid: str = "nb1", owner: str = "alice", command: tuple[str, ...] = ()) -> Workload:
    cmd = command or (str(PYTHON), "-c", SERVER)
    return Workload(id=wid, tenant="lab", owner=owner, kind=WorkloadKind.NOTEBOOK, command=cmd)


def one_gpu(wid: str = "nb1") -> Allocation:
    return Allocation(wid, "n1", (Share("n1", 1, "GPU-bbb", 1000, 81920),), since=0.0)


def served(ex: LocalExecutor, wid: str) -> ExecStatus:
    def check() -> ExecStatus | None:
        st = ex.poll(wid)
        assert st.state in (ExecState.RUNNING, ExecState.STARTING), (st, ex.logs(wid))
        return st if st.endpoint else None

    return wait_for(check, f"{wid} to listen", 30, 0.1)


@pytest.fixture
def account() -> Iterator[str]:
    """A fresh unprivileged Unix account with a home, removed afterwards."""
    name = f"gpt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--create-home", name], check=True, capture_output=True)
    yield name
    subprocess.run(["userdel", "-rf", name], capture_output=True)


def test_a_notebook_runs_as_its_owners_account_on_its_gpus_and_reports_where_it_listens(
    tmp_path: Path, user_accounts
):
    ex = LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user")
    ex.start(notebook(), one_gpu(), env=HUB_ENV)
    st = served(ex, "nb1")
    port = int(st.endpoint.rsplit(":", 1)[1])  # type: ignore[union-attr]
    assert st.endpoint == f"http://127.0.0.1:{port}"
    log = ex.logs("nb1").split()
    mine = user_accounts.ensure("alice")
    said = dict(zip(log[::2], log[1::2], strict=False))
    assert said["uid"] == str(mine.uid) != "0" and said["cwd"] == mine.home
    assert said["path"] == "/user/alice/"  # the hub's URL, moved to the port gpupool chose
    assert said["CUDA_VISIBLE_DEVICES"] == "GPU-bbb" and said["GPUPOOL_NOTEBOOK_PORT"] == str(port)
    assert said["JUPYTERHUB_API_TOKEN"] == "set"
    # the hub's token travels to the notebook only: not in the job's spec, not in its log
    assert "s3cret" not in (tmp_path / "jobs" / "nb1" / "spec.json").read_text()
    assert "s3cret" not in ex.logs("nb1")
    assert not (tmp_path / "jobs" / "nb1" / "env.json").exists()
    # a server after a restart adopts it, endpoint included
    again = LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user")
    assert [rp.workload_id for rp in again.list_running()] == ["nb1"]
    assert again.poll("nb1").endpoint == st.endpoint
    # stop ends it, with its grace period
    pids = again.job_pids("nb1")
    again.stop("nb1", "cancelled by alice", grace_s=30)
    ended = wait_for(
        lambda: (s := again.poll("nb1")).state not in (ExecState.RUNNING,) and s, "the stop", 30
    )
    assert ended.state is ExecState.FAILED and ended.endpoint is None
    assert all(not psutil_alive(p) for p in pids)


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_notebook_never_runs_as_the_shared_jobs_account(tmp_path: Path, user_accounts):
    """--jobs-account shares one account between members' plain jobs; a notebook is its
    owner's session (review F2b): it keeps the owner's own account."""
    ex = LocalExecutor(
        tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user", jobs_account="nobody"
    )
    ex.start(notebook(), None, env=HUB_ENV)
    served(ex, "nb1")
    uid = ex.logs("nb1").split()[1]
    assert uid == str(user_accounts.ensure("alice").uid) != str(pwd.getpwnam("nobody").pw_uid)
    ex.stop("nb1", "test", grace_s=0)


def test_per_user_mode_runs_the_notebook_as_the_owners_unix_account(tmp_path: Path, account):
    ex = LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="per-user")
    ex.start(notebook(owner="alice"), None, env=HUB_ENV, unix_user=account)
    served(ex, "nb1")
    assert ex.logs("nb1").split()[1] == str(pwd.getpwnam(account).pw_uid)
    ex.stop("nb1", "test", grace_s=0)


def test_a_notebook_that_cannot_start_fails_with_why_and_never_reports_an_endpoint(
    tmp_path: Path, user_accounts
):
    ex = LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user")
    ex.start(notebook(command=("/nonexistent/jupyterhub-singleuser",)), None, env=HUB_ENV)
    st = wait_for(lambda: (s := ex.poll("nb1")).state is ExecState.FAILED and s, "the failure", 30)
    assert (st.state, st.exit_code, st.endpoint) == (ExecState.FAILED, 127, None)
    assert "/nonexistent/jupyterhub-singleuser" in ex.logs("nb1")


def test_the_service_url_moves_to_the_chosen_port_and_nothing_else_changes():
    env = notebooks.service_env({"JUPYTERHUB_SERVICE_URL": "http://:0/user/a%20b/", "X": "1"}, 4)
    assert env == {"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:4/user/a%20b/", "X": "1"}
    assert notebooks.service_env({"X": "1"}, 4) == {"X": "1"}  # no hub: nothing to move


def test_only_a_listener_of_the_notebooks_own_account_is_its_endpoint():
    """A program of another account that took the port first would get the owner's
    requests through the hub's proxy: it is never reported as the notebook's endpoint."""
    assert notebooks.serving(None) is None
    port = notebooks.free_port()
    assert notebooks.serving({"port": port, "uid": os.geteuid()}) is None  # nobody listens
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        mine = {"port": port, "uid": os.geteuid()}
        assert notebooks.serving(mine) == f"http://127.0.0.1:{port}"
        assert notebooks.serving({"port": port, "uid": os.geteuid() + 4242}) is None
