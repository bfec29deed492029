"""What a first `gpupool up` prints before the admin's password (issue 30, item 10): no
schema-migration log lines, and on a machine without a GPU one clean notice that names the
simulation it starts."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.cli.test_up import GPUPOOL, PASSWORD
from tests.support import free_port

pytestmark = pytest.mark.slow


def _first_start(tmp_path) -> str:
    """Output of a first `gpupool up` (no --simulate) in a new data dir, until it serves."""
    env = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD, PYTHONUNBUFFERED="1")
    env.pop("GPUPOOL_DATABASE_URL", None)
    cmd = [*GPUPOOL, "up", "--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
    cmd += ["--no-jupyterhub", "--workers", "0", "--user-mode", "single-user"]
    cmd += ["--jobs-account", "nobody"] if os.geteuid() == 0 else []
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by the process: it serves or exits
            lines.append(line)
            if "Uvicorn running on" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return "".join(lines)


def test_a_first_start_prints_no_migrations_and_one_clean_no_gpu_notice(tmp_path):
    out = _first_start(tmp_path)
    assert "first admin created" in out, out
    before_password = out[: out.index("first admin created")]
    assert "alembic" not in before_password and "Running upgrade" not in before_password
    if "no NVIDIA GPU found" not in out:
        pytest.skip("this machine has an NVIDIA GPU: no notice to check")
    (notice,) = [line for line in out.splitlines() if "no NVIDIA GPU found" in line]
    assert "--simulate 4xH100-80GB" in notice and "2xH100" not in notice
    assert ".)." not in notice and ". ." not in notice and ".;" not in notice
    assert "with 4 GPU(s)" in out  # as the notice said


def test_a_first_start_says_where_the_dashboard_is(tmp_path):
    out = _first_start(tmp_path)
    (line,) = [x for x in out.splitlines() if "gpupool: serving on" in x]
    url = line.split("serving on ")[1].split()[0]
    assert f"dashboard: {url}/dashboard" in line, line
