"""Where Slurm jobs' output goes, that the jobs' accounts can reach it, and why a job that
never started failed.

slurmd opens a job's output file (``sbatch --output``) as the job's own account before the
batch script runs; when it cannot, the job ends at once as ``FAILED`` with Slurm's reason
``JobLaunchFailure`` (and "exit code" 181: signal 53), an empty log, and the cause only in
slurmd's log on the node. So:

- `default_output_dir`: as root (jobs run as their owners or the jobs account) the default is
  `SHARED_DEFAULT`, ``/var/lib/gpupool-slurm/output``, whose parents everyone may enter;
  gpupool's data directory (0700, under root's home) is not reachable by those accounts. Not
  root, jobs run as gpupool's own account and the default stays beside its data directory.
- `unreachable`: at start-up, the first directory on the path that other accounts may not
  enter (no ``o+x``), so that `gpupool up` refuses it with what to do instead of every job
  failing.
- Privacy: the directory is ``0711`` (anyone may open a file by name, nobody but root may
  list it or create files in it); gpupool makes each job's file ``0600`` owned by the job's
  account, so one user's output is not readable by another.
- `launch_failure`: the workload's message for ``JobLaunchFailure``, naming the output file
  and the directory that blocks the job's account where gpupool can see it.

On a cluster of several nodes the directory must be on a file system the compute nodes share
(same path): gpupool reads the output where the nodes write it; it cannot check the nodes.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from gpupool.engines.slurm.notebooks import port_file

#: the default output directory when gpupool runs as root
SHARED_DEFAULT = Path("/var/lib/gpupool-slurm/output")
#: Slurm's reason for a job whose batch script slurmd could not start
LAUNCH_FAILURE = "JobLaunchFailure"


def default_output_dir(data_dir: Path | None, as_root: bool) -> Path:
    """See the module docstring."""
    if as_root:
        return SHARED_DEFAULT
    base = data_dir.parent if data_dir else Path("/tmp")
    return base / "gpupool-slurm-output"


def unreachable(path: Path) -> Path | None:
    """The first directory from ``/`` down to `path` that other accounts may not enter (no
    ``o+x``), or None when every one of them may."""
    for d in [*reversed(path.parents), path]:
        try:
            mode = d.stat().st_mode
        except OSError:
            return d
        if not mode & stat.S_IXOTH:
            return d
    return None


def refusal(path: Path, blocker: Path) -> str:
    """Why `gpupool up` refuses `path` as the jobs' output directory, and what to do."""
    mode = stat.S_IMODE(blocker.stat().st_mode) if blocker.exists() else 0
    return (
        f"Slurm jobs could not write their output under {path}: {blocker} is {mode:04o}, so "
        "the jobs' accounts may not enter it (jobs run as their owners' or the jobs "
        "account, never as root). Pass --slurm-output-dir a directory on a file system the "
        "compute nodes share whose parents everyone may enter (o+x), e.g. "
        f"/shared/gpupool-output; the default as root is {SHARED_DEFAULT}"
    )


def _may(path: Path, uid: int, gids: set[int], bit: int) -> bool:
    """Whether `uid` (with groups `gids`) has permission `bit` (4 r, 2 w, 1 x) on `path`,
    by its mode bits (no ACLs; root may everything)."""
    st = path.stat()
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid in gids:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


def blocked_for(output: Path, uid: int, gids: set[int]) -> str | None:
    """What keeps the account from writing `output` on this host ("" unknown), or None."""
    try:
        for d in reversed(output.parents):
            if not _may(d, uid, gids, 1):
                return f"it may not enter {d} ({stat.S_IMODE(d.stat().st_mode):04o})"
        if output.exists() and not _may(output, uid, gids, 2):
            return f"it may not write {output} ({stat.S_IMODE(output.stat().st_mode):04o})"
    except OSError as e:
        return f"{e.filename}: {e.strerror}"
    return None


def launch_failure(job_id: str, node: str, output: Path, user: str, uid: int | None) -> str:
    """The message of a job Slurm could not start (see the module docstring)."""
    head = f"Slurm job {job_id} failed: Slurm could not start it ({LAUNCH_FAILURE})"
    why = None
    if uid is not None:
        try:
            gids = set(os.getgrouplist(user, pwd.getpwuid(uid).pw_gid))
        except (KeyError, OSError):
            gids = set()
        why = blocked_for(output, uid, gids)
    if why:
        return f"{head}: the job's account {user} could not open its output file {output}: {why}"
    where = f" on node {node}" if node else ""
    return (
        f"{head}; slurmd's log{where} says why: most often the job's account {user or '?'} "
        f"cannot write its output file {output} there (the output directory must be on a "
        "file system the compute nodes share) or its working directory"
    )


def prune_outputs(output_dir: Path, alive: set[str], now: float, older_than_s: float) -> list[str]:
    """Remove the output (and port) files of workloads not in `alive` whose output was last
    written more than `older_than_s` before `now`; their workload ids, sorted."""
    removed = []
    for path in output_dir.glob("*.out"):
        wid = path.name[: -len(".out")]
        if wid in alive:
            continue
        try:
            if now - path.stat().st_mtime < older_than_s:
                continue
            path.unlink()
            port_file(output_dir, wid).unlink(missing_ok=True)
        except FileNotFoundError:
            continue
        removed.append(wid)
    return sorted(removed)
