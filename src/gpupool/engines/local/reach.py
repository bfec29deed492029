"""Whether a Unix account can run a program, and if not, what stops it.

Jobs and notebooks run as other accounts than the server's (`gpupool.engines.common.accounts`), so
a program the server can run (its own Python in ``/root/venv``, a pyenv under ``/root``) may
be out of their reach. Everything here asks the kernel as that account, never from mode
bits: `can_run` runs the program as the account; `blocker` runs ``test -x`` on each directory
on the way to a path (then on the file, and a script's interpreter) in a shell started as
the account, the way the launcher starts a job (`RunAs.popen_kwargs`). Only `fix` reads mode
bits, to suggest which ``chmod`` would help.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the shell and PATH of the checks (never the job's environment)
_SH = "/bin/sh"
_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
#: prints the first operand the account cannot search (a directory) or run (a file)
_FIRST_BLOCKED = (
    'for p do if [ -d "$p" ]; then [ -x "$p" ] || { printf %s "$p"; exit 1; }; '
    'elif [ ! -x "$p" ] || [ ! -r "$p" ]; then printf %s "$p"; exit 1; fi; done'
)
#: where the docs suggest installing gpupool so that every account can run it
SHARED_INSTALL = "python3 -m venv /opt/gpupool && /opt/gpupool/bin/pip install gpupool"


@dataclass(frozen=True, slots=True)
class RunAs:
    """A Unix account as the launcher switches to it: uid, gid and supplementary groups."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = field(default=())

    @staticmethod
    def named(name: str) -> RunAs:
        pw = pwd.getpwnam(name)
        return RunAs(name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(name, pw.pw_gid)))

    @staticmethod
    def of_uid(uid: int, gid: int, groups: Sequence[int] = ()) -> RunAs:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = f"uid {uid}"
        return RunAs(name, uid, gid, tuple(groups))

    def popen_kwargs(self) -> dict[str, Any]:
        """What `subprocess.Popen` needs to start a process as this account (nothing when
        it is this process's own account: only root can switch)."""
        if os.geteuid() != 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


def _steps(path: str) -> list[str]:
    """`path`'s directories from the root down, then `path` itself."""
    p = Path(os.path.abspath(path))
    return [str(d) for d in reversed(p.parents)][1:] + [str(p)]


def _interpreter(path: str) -> str | None:
    """The interpreter a script names in its ``#!`` line (read as this process), if any."""
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return words[0] if words and words[0].startswith("/") else None


def blocker(path: str, account: RunAs) -> str | None:
    """The first directory on the way to `path` that `account` cannot search, or `path`
    itself (or its script's interpreter, the same way) when it cannot read and run it; None
    when it can. Asked as the account (see the module docstring)."""
    seen: set[str] = set()
    while path and path not in seen:
        seen.add(path)
        done = subprocess.run(
            [_SH, "-c", _FIRST_BLOCKED, "sh", *_steps(path)],
            env=_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            **account.popen_kwargs(),
        )
        if done.returncode != 0:
            return done.stdout.strip() or path
        path = _interpreter(path) or ""
    return None


def which(program: str, path_var: str) -> str | None:
    """Where `program` is, as this process sees it along `path_var` (a path: itself)."""
    if "/" in program:
        return program if os.path.exists(program) else None
    for d in path_var.split(os.pathsep):
        candidate = os.path.join(d or ".", program)
        if os.path.isfile(candidate):
            return candidate
    return None


def fix(path: str) -> str:
    """What an admin can do so that every account can run `path` (read from mode bits)."""
    closed = [d for d in _steps(path)[:-1] if not os.stat(d).st_mode & 0o001]
    prefix = Path(sys.prefix)
    inside = Path(path).is_relative_to(prefix)
    chmods = [d for d in closed if not (inside and Path(d).is_relative_to(prefix))]
    steps = [f"chmod o+x {' '.join(chmods)}"] if chmods else []
    if inside:
        steps.append(f"chmod -R o+rX {prefix}")
    how = " && ".join(steps) or f"chmod o+rx {path}"
    return f"{how}, or install gpupool where every account can read it ({SHARED_INSTALL})"


def why_not(program: str, account: RunAs, path_var: str) -> str | None:
    """What stops `account` from running `program` (found along `path_var`): the path and
    the account, for messages; None when nothing on the way does."""
    where = which(program, path_var)
    if where is None:
        return f"{program} was not found (PATH={path_var})"
    stop = blocker(where, account)
    if stop is None:
        return None
    what = "search the directory" if os.path.isdir(stop) else "read and run"
    return f"the Unix account {account.name} cannot {what} {stop}"


def can_run(
    argv: Sequence[str], account: RunAs, env: Mapping[str, str], timeout_s: float = 60.0
) -> str | None:
    """Run `argv` as `account` with `env`; None when it exits 0, else why not: what stops
    the account from running the program (`why_not`), or its exit and last line of output."""
    path_var = env.get("PATH", "")
    try:
        done = subprocess.run(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            **account.popen_kwargs(),
        )
    except (PermissionError, FileNotFoundError):
        return why_not(argv[0], account, path_var) or f"{argv[0]} could not be run"
    except subprocess.TimeoutExpired:
        return f"{' '.join(argv)} did not finish within {timeout_s:g} s as {account.name}"
    if done.returncode == 0:
        return None
    last = ((done.stderr or done.stdout).strip().splitlines() or [""])[-1]
    return why_not(argv[0], account, path_var) or (
        f"{' '.join(argv)} exited {done.returncode} as {account.name}: {last}"
    )
