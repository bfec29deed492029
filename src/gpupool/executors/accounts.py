"""Who a local job runs as, and what that lets it do.

`UserMode`:

- ``per-user``: each job runs as its owner's Unix account (needs the server to run as root).
- ``single-user``: one account runs every job. When the server runs as root that account is
  the dedicated unprivileged **jobs account** (``gpupool-jobs`` by default; `gpupool up`
  creates it if missing, or falls back to ``nobody`` and says so). When the server does not
  run as root it cannot switch users, so jobs run as the server's own account.

No job ever runs as root (uid 0): any mode, any mapping, any MPS service account.

`job_powers(mode, ...)` says in words what a job can do in a mode; `gpupool up` prints it and
docs/security.md explains it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from enum import StrEnum

from gpupool.executors.base import StartError

JOBS_ACCOUNT = "gpupool-jobs"
FALLBACK_ACCOUNT = "nobody"


class UserMode(StrEnum):
    PER_USER = "per-user"
    SINGLE_USER = "single-user"

    @staticmethod
    def default() -> UserMode:
        return UserMode.PER_USER if os.geteuid() == 0 else UserMode.SINGLE_USER


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str
    shell: str

    @staticmethod
    def of(pw: pwd.struct_passwd) -> Account:
        return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, pw.pw_shell)


def server_account() -> Account:
    return Account.of(pwd.getpwuid(os.geteuid()))


def default_jobs_account() -> str:
    """The jobs account an executor uses when none is named: `gpupool-jobs` if it exists,
    else `nobody` (only `gpupool up` creates accounts: `ensure_jobs_account`)."""
    try:
        pwd.getpwnam(JOBS_ACCOUNT)
    except KeyError:
        return FALLBACK_ACCOUNT
    return JOBS_ACCOUNT


def unprivileged(name: str, *, why: str) -> Account:
    """The Unix account `name`; `StartError` (permanent) if it is missing or is root."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise StartError(
            f"{why}: there is no Unix account {name!r} on this host", permanent=True
        ) from None
    if pw.pw_uid == 0:
        raise StartError(
            f"{why}: {name!r} is root (uid 0) and gpupool never runs jobs as root; "
            "use an unprivileged account",
            permanent=True,
        )
    return Account.of(pw)


def ensure_jobs_account(name: str = JOBS_ACCOUNT) -> tuple[str, str | None]:
    """The account single-user jobs run as when the server is root: `name` if it exists,
    else created (a system account with its own group and a home in /var/lib/<name>); if it
    cannot be created, `nobody`. Returns (account, a warning to show or None)."""
    try:
        if pwd.getpwnam(name).pw_uid == 0:
            return FALLBACK_ACCOUNT, f"{name!r} is root; running jobs as {FALLBACK_ACCOUNT!r}"
        return name, None
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is not None:
        home = f"/var/lib/{name}"
        done = subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--create-home",
                "--home-dir",
                home,
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            os.chmod(home, 0o700)
            return name, None
        why = (done.stderr or done.stdout).strip() or f"useradd exited {done.returncode}"
    else:
        why = "useradd is not installed"
    return FALLBACK_ACCOUNT, (
        f"could not create the jobs account {name!r} ({why}); jobs run as "
        f"{FALLBACK_ACCOUNT!r}, which other services may share: create {name!r} "
        f"(useradd --system {name}) and restart"
    )


def job_powers(mode: UserMode | str, server: Account, jobs_account: str | None) -> list[str]:
    """What a member's job can and cannot do in this mode, one sentence a line."""
    mode = UserMode(mode)
    if mode is UserMode.PER_USER:
        return [
            "jobs run as their owners' Unix accounts, never as root;",
            "a job can read and write what its owner's account can, and signal only its "
            "owner's processes;",
            "it cannot read or write gpupool's data directory, database or secrets (0700/0600, "
            f"owned by {server.name}).",
        ]
    if server.uid == 0:
        return [
            f"every job runs as the unprivileged account {jobs_account!r}, never as root;",
            "it cannot read or write gpupool's data directory, database or secrets (0700/0600, "
            "owned by root);",
            f"jobs of different gpupool users share {jobs_account!r}: one member's job can read, "
            "change and signal another member's running jobs and their files. Use "
            "--user-mode per-user to separate members.",
        ]
    return [
        f"every job runs as this server's own account {server.name!r} (only root can start "
        "jobs as another account);",
        "a job CAN read and write gpupool's database and secrets and signal the server: any "
        "member can make themself admin. Fine for one person's machine; for several people "
        "run gpupool as root (per-user mode, or a dedicated jobs account).",
    ]
