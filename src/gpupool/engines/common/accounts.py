"""Who a local job runs as, and what that lets it do.

`UserMode`:

- ``per-user``: each job runs as its owner's existing Unix account (the user's ``unix_user``,
  else the gpupool name); needs the server to run as root and a directory of accounts.
- ``single-user``: no directory of accounts is needed. When the server runs as root, each
  gpupool user's jobs and notebooks run as an account gpupool makes for that user alone
  (`gpupool.engines.local.user_accounts`: ``gp-<name>``), so members never share a uid. Only
  when the admin names a shared **jobs account** (``gpupool up --jobs-account``) do all
  members' plain jobs run as that one account (notebooks still get their own accounts).
  When the server does not run as root it cannot switch users: every job and notebook runs
  as the server's own account, and JupyterHub serves the first admin only
  (`gpupool.server.services.notebooks`).

No job ever runs as root (uid 0): any mode, any mapping, any MPS service account.

`job_powers(mode, ...)` says in words what a job can do in a mode; `gpupool up` prints it and
docs/security.md explains it."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from enum import StrEnum

from gpupool.engines.common.executor import StartError

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
    """The shared account every member's plain job runs as when the admin names one
    (`gpupool up --jobs-account`, root, single-user): `name` if it exists, else created (a
    system account with its own group and a home in /var/lib/<name>); if it cannot be
    created, `nobody`. Returns (account, a warning to show or None)."""
    try:
        if pwd.getpwnam(name).pw_uid == 0:
            return FALLBACK_ACCOUNT, f"{name!r} is root; running jobs as {FALLBACK_ACCOUNT!r}"
        return name, None
    except KeyError:
        pass
    fixed = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # never the server's
    useradd = shutil.which("useradd", path=fixed["PATH"])
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
            env=fixed,
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


def job_powers(
    mode: UserMode | str,
    server: Account,
    jobs_account: str | None,
    accounts_home: str = "/var/lib/gpupool-users",
) -> list[str]:
    """What a member's job can and cannot do in this mode, one sentence a line.
    `jobs_account`: the shared account of single-user jobs under root, if the admin named
    one (None: each user's own account, homes in `accounts_home`)."""
    mode = UserMode(mode)
    private = (
        "it cannot read or write gpupool's data directory, database or secrets (0700/0600, "
        f"owned by {server.name})."
    )
    if mode is UserMode.PER_USER:
        return [
            "jobs run as their owners' Unix accounts, never as root;",
            "a job can read and write what its owner's account can, and signal only its "
            "owner's processes;",
            private,
        ]
    if server.uid == 0 and jobs_account is None:
        return [
            "each gpupool user's jobs and notebooks run as an unprivileged Unix account of "
            f"their own, made on first use (gp-<name>, home {accounts_home}/<account>, 0700), "
            "never as root;",
            "a job can read and write what its owner's account can, and signal only its "
            "owner's processes: not other members' jobs, files or notebook homes;",
            private,
        ]
    if server.uid == 0:
        return [
            f"every member's job runs as the one unprivileged account {jobs_account!r} "
            "(--jobs-account), never as root;",
            private.removesuffix(".") + ";",
            f"jobs of different gpupool users share {jobs_account!r}: one member's job can "
            "read, change and signal another member's running jobs and their files "
            "(notebooks still run as each user's own account). Leave out --jobs-account to "
            "give each user's jobs their own account.",
        ]
    return [
        f"every job and notebook runs as this server's own account {server.name!r} (only "
        "root can start them as another account);",
        "a job CAN read and write gpupool's database and secrets and signal the server: any "
        "member can make themself admin. Fine for one person's machine; for several people "
        "run gpupool as root (each user then gets their own account).",
    ]
