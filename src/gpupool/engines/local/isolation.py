"""What the local engine does to keep members' jobs away from gpupool itself.

- `choose_jobs_account`: as root in single-user mode, each user's jobs run as their own
  account (`gpupool.engines.local.user_accounts`); only when the admin names a shared jobs
  account (`--jobs-account`) do all jobs run as it (created if missing; `nobody` if it
  cannot be). `check_user_accounts` says why accounts cannot be made here, if so.
- `isolation_lines`: what the chosen mode lets a job do, printed at start-up.
"""

from __future__ import annotations

import os

from gpupool.engines.common.accounts import (
    UserMode,
    ensure_jobs_account,
    job_powers,
    server_account,
)
from gpupool.engines.local.user_accounts import UserAccounts


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
