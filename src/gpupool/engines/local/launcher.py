"""The tiny process that runs one job and records how it ended.

    python -m gpupool.engines.local.launcher STATE_DIR [--uid U --gid G --groups G1,G2]
        [--cgroup PATH] -- COMMAND...

The local executor starts this launcher in a new session (so the launcher leads the job's
process group) with stdout/stderr already pointing at the job's log file. The launcher:

1. writes ``STATE_DIR/pid`` ("<pid> <starttime>", starttime from /proc/<pid>/stat, which
   tells a live launcher from a later process that reused its pid), and moves itself into
   the job's cgroup PATH when given;
2. reads the job's environment from ``STATE_DIR/env.json`` (and deletes the file), then runs
   COMMAND as its child with that environment and umask 022 (as user U / group G when given:
   the launcher itself stays with the server's account, so the job's owner cannot forge its
   exit code), forwarding SIGTERM/SIGINT/SIGHUP to it;
3. when the child ends, kills every other process of the job (its cgroup, process group,
   session and environment marker, `gpupool.engines.local.tracking`): background processes, even
   ones that called ``setsid``, must not keep holding its GPU;
4. writes ``STATE_DIR/exitcode`` ("<code> <epoch seconds>") atomically and exits with it.

Exit codes follow the shell: a child killed by signal N ends with 128 + N; a command that
cannot be executed ends with 127 (not found) or 126 (not executable). If the launcher itself
is killed with SIGKILL no exit code is written; the executor then knows the end from its
own stop record, or reports the work as lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpupool.engines.common.files import write_atomic
from gpupool.engines.local.tracking import MARKER_ENV, join_cgroup, kill_job

PID_FILE = "pid"
EXIT_FILE = "exitcode"
ENV_FILE = "env.json"


def proc_starttime(pid: int) -> tuple[int, str] | None:
    """(starttime in clock ticks since boot, state letter) of `pid`, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state); starttime is field 22 -> rest[19].
    return int(rest[19]), rest[0]


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) if needed and make it 0700: only its owner gets in."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def _read_env(state: Path) -> dict[str, str] | None:
    try:
        env = json.loads((state / ENV_FILE).read_text())
    except (OSError, ValueError):
        return None
    (state / ENV_FILE).unlink(missing_ok=True)
    return {str(k): str(v) for k, v in env.items()}


def _found(program: str, path: str) -> bool:
    if "/" in program:
        return os.path.exists(program)
    return any(os.path.exists(os.path.join(d or ".", program)) for d in path.split(os.pathsep))


def _cannot_run(program: str, path_var: str, ids: dict[str, Any], error: OSError) -> int:
    """Say on the job's output why `program` could not be run, naming its path and the
    account (`gpupool.engines.local.reach`); returns the shell's exit code: 126 when it exists
    but the account may not run it, else 127 (not found)."""
    from gpupool.engines.local import reach

    if "user" in ids:
        who = reach.RunAs.of_uid(ids["user"], ids["group"], ids.get("extra_groups", ()))
    else:
        who = reach.RunAs.of_uid(os.geteuid(), os.getegid())
    where = reach.which(program, path_var) if _found(program, path_var) else None
    if where is None:
        say = f"command not found: {program} (searched PATH={path_var} as {who.name})"
        code = 127
    else:
        stop = reach.why_not(program, who, path_var) or f"{error.strerror}"
        say = (
            f"permission denied: {where}: {stop}. Run a program {who.name} can reach (e.g. "
            "python3 of the system), or ask the admin to make it reachable: "
            f"{reach.fix(where)}"
        )
        code = 126
    print(f"gpupool: {say}", file=sys.stderr, flush=True)
    return code


def _parse(argv: list[str]) -> tuple[Path, dict[str, Any], list[str]] | None:
    if "--" not in argv or argv.index("--") < 1 or argv.index("--") == len(argv) - 1:
        return None
    sep = argv.index("--")
    opts, command = argv[1:sep], argv[sep + 1 :]
    ids: dict[str, object] = {}
    it = iter(opts)
    for flag in it:
        value = next(it, None)
        if value is None or flag not in ("--uid", "--gid", "--groups", "--cgroup"):
            return None
        if flag == "--cgroup":
            ids["cgroup"] = value
        elif flag == "--groups":
            ids["extra_groups"] = [int(g) for g in value.split(",") if g]
        else:
            ids["user" if flag == "--uid" else "group"] = int(value)
    return Path(argv[0]), ids, command


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        usage = (
            "usage: python -m gpupool.engines.local.launcher STATE_DIR [--uid U --gid G] -- CMD..."
        )
        print(usage, file=sys.stderr)
        return 2
    state, ids, command = parsed
    me = os.getpid()
    info = proc_starttime(me)
    write_atomic(state / PID_FILE, f"{me} {info[0] if info else 0}\n")
    cgroup = Path(str(ids.pop("cgroup"))) if "cgroup" in ids else None
    if cgroup is not None and not join_cgroup(cgroup):
        cgroup = None
    env = _read_env(state)
    if env is None:
        print("gpupool: the job's environment file is missing", file=sys.stderr, flush=True)
        write_atomic(state / EXIT_FILE, f"1 {time.time():.3f}\n")
        return 1
    marker = env.get(MARKER_ENV)

    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)
        else:
            pending.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            restore_signals=True,
            env=env,
            umask=0o022,
            **ids,
        )
    except (FileNotFoundError, PermissionError) as e:
        code = _cannot_run(command[0], env.get("PATH", ""), ids, e)
    else:
        for signum in pending:
            child.send_signal(signum)
        rc = child.wait()
        code = 128 - rc if rc < 0 else rc
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_job(me, marker, cgroup, spare=me)
    write_atomic(state / EXIT_FILE, f"{code} {time.time():.3f}\n")
    return code


if __name__ == "__main__":  # pragma: no cover - exercised through real subprocesses
    sys.exit(main(sys.argv[1:]))
