"""Finding and ending every process of a local job, including those that try to escape it.

A job's processes are found in four ways (the union counts):

1. its **cgroup** (cgroup v2), when the host lets gpupool create one: the launcher moves
   itself into ``<root>/<workload>-<token>`` before it starts the job, and every descendant
   stays there whatever it does (``setsid``, double fork, ``nohup``); only root can move a
   process out. Ending the job writes ``cgroup.kill``, which kills every member at once;
2. its **process group** and 3. its **session** (both the launcher's pid: the launcher leads
   them), which catch ordinary children and background jobs;
4. its **environment marker** ``GPUPOOL_JOB_MARKER=<workload>:<random token>``: the kernel
   keeps a process's initial environment in ``/proc/<pid>/environ``, and children inherit it,
   so a child that calls ``setsid`` still carries it (a process that execs with an emptied
   environment drops it: only the cgroup catches that one).

`detect_cgroup_root()` finds where per-job cgroups can go: a cgroup2 mount where this
process may create a child of its own cgroup (root, or a delegated subtree such as systemd's
``Delegate=yes``). None means the host does not delegate one; tracking then relies on 2-4.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import time
from collections.abc import Iterable
from pathlib import Path

MARKER_ENV = "GPUPOOL_JOB_MARKER"
CGROUP_DIR = "gpupool-jobs"
#: A process may fork while it is being killed: sweep again until nothing is left (bounded).
KILL_ROUNDS = 8


def new_marker(workload_id: str) -> str:
    """A marker unique to one start of one job."""
    return f"{workload_id}:{secrets.token_hex(8)}"


def _cgroup2_mount(mountinfo: str) -> Path | None:
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def detect_cgroup_root(proc_self: Path = Path("/proc/self"), name: str = CGROUP_DIR) -> Path | None:
    """The cgroup v2 directory under which per-job cgroups can be made, or None.

    It is ``<cgroup2 mount>/<this process's cgroup>/<name>``, created if missing; it counts
    only if a child can be made in it and a process moved into it is accepted (checked by
    creating and removing a probe cgroup)."""
    try:
        mount = _cgroup2_mount((proc_self / "mountinfo").read_text())
        own = next(
            (ln[3:] for ln in (proc_self / "cgroup").read_text().splitlines() if ln[:3] == "0::"),
            None,
        )
    except OSError:
        return None
    if mount is None or own is None:
        return None
    root = mount / own.strip().lstrip("/") / name
    probe = root / f"probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        root.mkdir(exist_ok=True)
        probe.mkdir()
    except OSError:
        return None
    try:
        ok = os.access(probe / "cgroup.procs", os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return root if ok else None


def executor_cgroup_root(state_dir: Path) -> Path | None:
    """One executor's own cgroup subtree: `<host root>/<hash of its state dir>`, so two
    servers (or tests) on one host never touch each other's job cgroups (None: no delegation)."""
    host = detect_cgroup_root()
    if host is None:
        return None
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    try:
        (host / digest).mkdir(exist_ok=True)
    except OSError:
        return None
    return host / digest


def make_job_cgroup(root: Path | None, workload_id: str, marker: str) -> Path | None:
    """A fresh cgroup under `root` for one start of a job (None when there is none)."""
    if root is None:
        return None
    path = root / f"{workload_id}-{marker.rsplit(':', 1)[1]}"
    try:
        path.mkdir()
    except OSError:
        return None
    return path


def join_cgroup(path: Path, pid: int | None = None) -> bool:
    """Move `pid` (default: this process) into the cgroup at `path`. False when refused."""
    try:
        (path / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
    except OSError:
        return False
    return True


def cgroup_pids(path: Path | None) -> set[int]:
    if path is None:
        return set()
    try:
        return {int(x) for x in (path / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def job_pids(leader: int | None, marker: str | None, cgroup: Path | None) -> set[int]:
    """Every process of the job: its cgroup's members, the members of the process group and
    session that `leader` leads, and carriers of `marker` (one /proc scan). Pass `leader` only
    while the launcher is known alive: once it is gone its pid may lead someone else's group."""
    found = cgroup_pids(cgroup)
    needle = f"{MARKER_ENV}={marker}".encode() if marker else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if leader:
            try:
                if os.getpgid(pid) == leader or os.getsid(pid) == leader:
                    found.add(pid)
                    continue
            except (ProcessLookupError, PermissionError):
                continue
        if needle is not None and _environ_has(pid, needle):
            found.add(pid)
    return found


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_job(
    leader: int | None, marker: str | None, cgroup: Path | None, *, spare: int | None = None
) -> set[int]:
    """SIGKILL every process of the job (but `spare`, e.g. the launcher itself) until none is
    left or `KILL_ROUNDS` sweeps were made. Returns the pids that were signalled."""
    killed: set[int] = set()
    if cgroup is not None and spare is None:
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1\n")
    quiet = 0
    for _ in range(KILL_ROUNDS):
        pids = {p for p in job_pids(leader, marker, cgroup) if p != spare and _alive(p)}
        if not pids:
            # a process in the middle of execve shows an empty environment for a moment:
            # one more sweep before believing that nothing is left
            quiet += 1
            if quiet == 2:
                break
            continue
        quiet = 0
        signal_pids(pids, signal.SIGKILL)
        killed |= pids
    return killed


def _alive(pid: int) -> bool:
    """False for processes that are gone or zombies (a zombie holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] not in (b"Z", b"X")


def remove_cgroup(cgroup: Path | None, wait_s: float = 2.0) -> bool:
    """Remove a job cgroup once its killed members are gone (they leave it as they exit,
    which takes the kernel a moment after cgroup.kill). False while members stay after
    `wait_s`, or when there is none."""
    if cgroup is None:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return False
        except OSError:
            if time.monotonic() >= deadline or not cgroup_pids(cgroup) and not _populated(cgroup):
                return False
            time.sleep(0.01)


def _populated(cgroup: Path) -> bool:
    try:
        return "populated 1" in (cgroup / "cgroup.events").read_text()
    except OSError:
        return False


def all_sessions() -> dict[int, list[int]]:
    """session id -> pids in it, from /proc (processes we may not read are skipped)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            sid = os.getsid(int(entry))
        except (ProcessLookupError, PermissionError):
            continue
        out.setdefault(sid, []).append(int(entry))
    return out
