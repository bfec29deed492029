"""What the local engine does to keep members' jobs away from gpupool itself.

- `secure_data_dir`: the data directory 0700; the database and its side files, job state
  files and secrets 0600; job directories 0700. Run at every start, so installs made by
  earlier versions (0755 / 0644) are fixed.
- `choose_jobs_account`: as root in single-user mode, each user's jobs run as their own
  account (`gpupool.executors.user_accounts`); only when the admin names a shared jobs
  account (`--jobs-account`) do all jobs run as it (created if missing; `nobody` if it
  cannot be). `check_user_accounts` says why accounts cannot be made here, if so.
- `isolation_lines`: what the chosen mode lets a job do, printed at start-up.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gpupool.executors.accounts import (
    UserMode,
    ensure_jobs_account,
    job_powers,
    server_account,
)
from gpupool.executors.user_accounts import UserAccounts

#: Directories under the data dir that jobs never need (their files are the server's).
PRIVATE_TREES = ("jobs", "hub-launch", "hub")


def secure_data_dir(data_dir: Path) -> list[str]:
    """Make the data directory private to the server's account; return what was fixed."""
    fixed: list[str] = []

    def tighten(p: Path, want: int) -> None:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            st = p.lstat()
            if p.is_symlink() or st.st_uid != os.geteuid():
                return  # a job's own file (its log) or a link: leave it alone
            if st.st_mode & 0o777 & ~want:
                p.chmod(st.st_mode & 0o777 & want)
                fixed.append(str(p))

    tighten(data_dir, 0o700)
    for child in data_dir.iterdir():
        if child.is_file():
            tighten(child, 0o600)
    for name in PRIVATE_TREES:
        tree = data_dir / name
        if not tree.is_dir():
            continue
        tighten(tree, 0o700)
        for root, dirs, files in os.walk(tree):
            for d in dirs:
                tighten(Path(root) / d, 0o700)
            for f in files:
                tighten(Path(root) / f, 0o600)
    return fixed


def choose_jobs_account(mode: str, requested: str | None) -> tuple[str | None, str | None]:
    """(the one account all single-user jobs share, a warning or None). None when none was
    asked for (each user's own account), in per-user mode and when not root (the server's
    own account)."""
    if requested is None or UserMode(mode) is UserMode.PER_USER or os.geteuid() != 0:
        return None, None
    return ensure_jobs_account(requested)


def check_user_accounts(mode: str) -> str | None:
    """Why single-user mode under root cannot make each user's account here, or None."""
    if UserMode(mode) is UserMode.PER_USER or os.geteuid() != 0:
        return None
    why = UserAccounts.default().cannot()
    if why is None:
        return None
    return (
        f"single-user mode as root makes a Unix account for each gpupool user, but {why}; "
        "install it, or pass --jobs-account NAME to run every member's jobs as one shared "
        "account (members can then reach each other's jobs), or use --user-mode per-user"
    )


def isolation_lines(mode: str, jobs_account: str | None) -> list[str]:
    """The start-up lines saying who jobs run as and what they can do."""
    home = str(UserAccounts.default().home_base)
    return [
        f"gpupool: {mode} mode: {line}"
        for line in job_powers(mode, server_account(), jobs_account, home)
    ]
