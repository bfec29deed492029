"""gpupool tenants as Slurm accounts (`sacctmgr -i`).

Mapping: tenant path ``physics/lab-a`` → Slurm account ``<prefix>physics.lab-a`` (prefix
``gp.`` by default; ``/`` becomes ``.``; Slurm stores account names in lower case), whose
parent is the parent tenant's account (a top tenant's parent is ``root``): Slurm's account
tree mirrors gpupool's tenant tree. Each account gets ``GrpTRES=gres/gpu=<limit>`` (the
tenant's limit rounded up to whole GPUs; no limit: ``-1``), a backstop behind gpupool's own
quota: gpupool never submits beyond it, so Slurm only refuses work it did not submit.

A user's association (``sacctmgr add user <unix account> Account=<account>``) is made before
their first job in a tenant. Accounts of deleted tenants are left alone (Slurm keeps history
on them); gpupool never touches accounts without its prefix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpupool.domain import Tenant
from gpupool.engines.slurm.cli import SlurmCLI

DEFAULT_PREFIX = "gp."


def account_name(tenant: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The Slurm account of a tenant path (see the module docstring)."""
    return (prefix + tenant.replace("/", ".")).lower()


def gpu_limit(tenant: Tenant) -> int:
    """Whole GPUs of the tenant's limit; -1 (Slurm: no limit) when it has none."""
    limit = tenant.quota.limit_milli
    return -1 if limit is None else math.ceil(limit / 1000)


class SlurmAccounts:
    """Keeps Slurm's accounts and associations in line with gpupool's tenants."""

    def __init__(self, cli: SlurmCLI, prefix: str = DEFAULT_PREFIX) -> None:
        self.cli, self.prefix = cli, prefix
        self._limits: dict[str, int] = {}  # account -> GrpTRES gpu last set
        self._users: set[tuple[str, str]] = set()

    def account_of(self, tenant: str) -> str:
        return account_name(tenant, self.prefix)

    def _existing(self) -> dict[str, str]:
        """Accounts with gpupool's prefix -> their GrpTRES (as sacctmgr prints it)."""
        rows = self.cli.sacctmgr_list("association", "format=Account,User,GrpTRES")
        return {
            r[0]: r[2] for r in rows if len(r) >= 3 and not r[1] and r[0].startswith(self.prefix)
        }

    def sync(self, tenants: Iterable[Tenant]) -> list[str]:
        """Create missing accounts (parents first) and set changed limits; the accounts
        changed."""
        existing = self._existing()
        for name, tres in existing.items():
            self._limits.setdefault(name, _gpus_in(tres))
        changed = []
        for t in sorted(tenants, key=lambda t: t.depth):
            acct = self.account_of(t.name)
            limit = gpu_limit(t)
            if acct not in existing:
                parent = self.account_of(t.parent) if t.parent else "root"
                self.cli.sacctmgr(
                    "add", "account", acct, f"Parent={parent}", f"Description=gpupool {t.name}"
                )
                existing[acct] = ""
                self._limits[acct] = -1
                changed.append(acct)
            if self._limits.get(acct) != limit:
                self.cli.sacctmgr(
                    "modify", "account", "where", f"name={acct}", "set", f"GrpTRES=gres/gpu={limit}"
                )
                self._limits[acct] = limit
                if acct not in changed:
                    changed.append(acct)
        return changed

    def ensure_user(self, user: str, account: str) -> None:
        """The association of `user` with `account` (made once; an existing one is fine)."""
        if (user, account) in self._users:
            return
        rows = self.cli.sacctmgr_list(
            "association", "where", f"user={user}", f"account={account}", "format=User"
        )
        if not rows:
            self.cli.sacctmgr("add", "user", user, f"Account={account}")
        self._users.add((user, account))


def _gpus_in(tres: str) -> int:
    for part in tres.split(","):
        if part.startswith("gres/gpu="):
            return int(part.split("=", 1)[1])
    return -1
