"""Starting one run of a job: the launcher process (`gpupool.engines.local.launcher`) in a
session of its own, as the job's account, with its output appended to the job's log.

`spawn_launcher` is the only place the local executor forks. The launcher gets only the
variables it needs to import gpupool (`LAUNCHER_ENV`) plus the workload id and the job's
marker; the job's own environment is in the state dir's env file, which the launcher reads.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

from gpupool.domain import Workload
from gpupool.engines.common import reruns
from gpupool.engines.common.accounts import Account
from gpupool.engines.common.executor import StartError
from gpupool.engines.local.tracking import MARKER_ENV, remove_cgroup

LOG_FILE = "output.log"
#: variables the launcher itself needs (to import gpupool); the job gets its own environment
LAUNCHER_ENV = ("PATH", "PYTHONPATH", "LANG")


def spawn_launcher(
    python: str,
    job_dir: Path,
    workload: Workload,
    account: Account,
    *,
    marker: str,
    cgroup: Path | None,
    now: float,
    stopped_at: float | None,
) -> subprocess.Popen[bytes]:
    """Start the launcher for `workload` over `job_dir` as `account` (switching user only
    when it is not the server's own), in `cgroup` when given; the log (``output.log``, 0600,
    owned by the account) gets a separator line for this run first. Raises `StartError`
    (permanent where no retry can help: a NUL byte, arguments too long); the cgroup is
    removed then."""
    switch = account.uid != os.geteuid()
    ids: list[str] = []
    if switch:
        groups = ",".join(str(g) for g in os.getgrouplist(account.name, account.gid))
        ids = ["--uid", str(account.uid), "--gid", str(account.gid), "--groups", groups]
    if cgroup is not None:
        ids += ["--cgroup", str(cgroup)]
    # the log is private to the job's owner (and the server); a rerun is appended
    fd = os.open(job_dir / LOG_FILE, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    if switch:
        os.fchown(fd, account.uid, account.gid)
    reruns.mark_new_run(fd, reruns.separator(workload, now, stopped_at))
    log = os.fdopen(fd, "ab")
    argv = [python, "-m", "gpupool.engines.local.launcher", str(job_dir), *ids, "--"]
    argv += list(workload.command)
    cwd = account.home if os.path.isdir(account.home) else "/"
    launcher_env = {k: os.environ[k] for k in LAUNCHER_ENV if k in os.environ}
    launcher_env.update(GPUPOOL_WORKLOAD_ID=workload.id, **{MARKER_ENV: marker})
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=launcher_env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    except ValueError as e:  # e.g. an embedded NUL byte: no retry can help
        remove_cgroup(cgroup)
        raise StartError(f"could not start workload {workload.id}: {e}", permanent=True) from e
    except OSError as e:  # E2BIG (arguments too long) cannot change; others may
        remove_cgroup(cgroup)
        raise StartError(
            f"could not start workload {workload.id}: {e}", permanent=e.errno == errno.E2BIG
        ) from e
    finally:
        log.close()
