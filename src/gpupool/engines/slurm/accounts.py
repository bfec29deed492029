"""gpupool tenants as Slurm accounts (`sacctmgr -i`).

Mapping: tenant path → Slurm account `gpupool.domain.external_names.slurm_account_name`,
which is injective (security review F12): a lower-case path of letters, digits, ``_`` and
``-`` keeps its readable name (``physics/lab-a`` → ``gp.physics.lab-a``; prefix ``gp.`` by
default, ``/`` becomes ``.``); any other path (upper case, a ``.`` in a segment, too long)
gets a readable lossy form plus ``.h`` and 10 hex digits of SHA-256 of the exact path
(``ML/Team`` → ``gp.ml.team.h…``). So ``a/b``, ``a.b`` and ``A/b`` are three accounts. The
account's parent is the parent tenant's account (a top tenant's parent is ``root``): Slurm's
account tree mirrors gpupool's tenant tree. Each account gets ``GrpTRES=gres/gpu=<limit>``
(the tenant's limit rounded up to whole GPUs; no limit: ``-1``), a backstop behind gpupool's
own quota: gpupool never submits beyond it, so Slurm only refuses work it did not submit.

Ownership: each account gpupool makes carries its exact tenant in its ``Description``
(`account_mark`: ``gpupool tenant <path>``; Slurm stores descriptions in lower case, so a path
with upper case also gets a hash of its exact form). `SlurmAccounts.sync` uses, changes and
submits to only accounts marked for their tenant: an account of that name made by someone
else (another tenant's mark, or none: made by hand) is *refused*: left untouched, reported
in the sync's result, and `ensure_user` raises `SlurmError` for it, so no job of the tenant
is submitted under it until an admin renames or removes that account. A tenant under a
refused account is refused too (its account would hang under someone else's).

Upgrades: accounts made by gpupool before the marks carry ``gpupool <path>``; where the
tenant's account keeps its name (lower-case plain paths), that old mark is taken as
gpupool's and replaced by the new one. Tenants whose names change get new accounts; the old
accounts are left alone (Slurm keeps history on them), as are accounts of deleted tenants;
gpupool never touches accounts without its prefix.

A user's association (``sacctmgr add user Names=<unix account> Account=<account>``) is made
before their first job in a tenant.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpupool.domain import Tenant
from gpupool.domain.external_names import slurm_account_name
from gpupool.engines.slurm.cli import SlurmCLI, SlurmError

DEFAULT_PREFIX = "gp."
MARK = "gpupool tenant "
#: the mark an older gpupool gave its accounts (taken over where the name did not change)
_OLD_MARK = "gpupool "
_MARK_MAX = 200


def account_name(tenant: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The Slurm account of a tenant path (injective; see the module docstring)."""
    return slurm_account_name(tenant, prefix)


def account_mark(tenant: str) -> str:
    """The ``Description`` that marks an account as tenant `tenant`'s: ``gpupool tenant
    <path>``, exact after Slurm lower-cases it (a path with upper case, or a long one, gets
    ``sha256:<16 hex>`` of the exact path; plain paths have no spaces, so marks never meet)."""
    if tenant == tenant.lower() and len(MARK) + len(tenant) <= _MARK_MAX:
        return MARK + tenant
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:16]
    return f"{MARK}{tenant.lower()[:150]} sha256:{digest}"


def gpu_limit(tenant: Tenant) -> int:
    """Whole GPUs of the tenant's limit; -1 (Slurm: no limit) when it has none."""
    limit = tenant.quota.limit_milli
    return -1 if limit is None else math.ceil(limit / 1000)


@dataclass
class SyncResult:
    """What one `SlurmAccounts.sync` did: accounts created or changed, and accounts refused
    (account -> why)."""

    changed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class SlurmAccounts:
    """Keeps Slurm's accounts and associations in line with gpupool's tenants."""

    def __init__(self, cli: SlurmCLI, prefix: str = DEFAULT_PREFIX) -> None:
        self.cli, self.prefix = cli, prefix
        self._limits: dict[str, int] = {}  # account -> GrpTRES gpu last set
        self._users: set[tuple[str, str]] = set()
        #: account -> why gpupool does not use it (the last sync's refusals)
        self.refused: dict[str, str] = {}

    def account_of(self, tenant: str) -> str:
        return account_name(tenant, self.prefix)

    def _existing(self) -> dict[str, tuple[str, str]]:
        """Accounts with gpupool's prefix -> (their description, their GrpTRES)."""
        described = {
            r[0]: r[1]
            for r in self.cli.sacctmgr_list("account", "format=Account,Description")
            if len(r) >= 2 and r[0].startswith(self.prefix)
        }
        rows = self.cli.sacctmgr_list("association", "format=Account,User,GrpTRES")
        tres = {r[0]: r[2] for r in rows if len(r) >= 3 and not r[1] and r[0] in described}
        return {a: (d, tres.get(a, "")) for a, d in described.items()}

    def _why_not_ours(self, tenant: str, acct: str, description: str) -> str | None:
        """None when `description` marks `acct` as `tenant`'s, else why it is refused."""
        if description == account_mark(tenant):
            return None
        if description == _OLD_MARK + tenant.lower() and tenant == tenant.lower():
            return None  # an older gpupool's mark of the same tenant (see the docstring)
        owner = "no gpupool tenant" if not description.startswith(MARK) else "another tenant"
        return (
            f"Slurm account {acct} exists and belongs to {owner} (its description is "
            f"{description!r}, not {account_mark(tenant)!r}); gpupool does not use it for "
            f"tenant {tenant!r}: rename or remove it in Slurm (sacctmgr), or rename the tenant"
        )

    def sync(self, tenants: Iterable[Tenant]) -> SyncResult:
        """Create missing accounts (parents first), mark and set changed limits of gpupool's
        own, refuse others' (see the module docstring)."""
        existing = self._existing()
        result = SyncResult()
        for t in sorted(tenants, key=lambda t: t.depth):
            acct = self.account_of(t.name)
            parent = self.account_of(t.parent) if t.parent else "root"
            if parent in result.refused:
                result.refused[acct] = (
                    f"tenant {t.name!r} is not mirrored in Slurm: its parent's account "
                    f"{parent} is not gpupool's"
                )
                continue
            mark = account_mark(t.name)
            if acct not in existing:
                self.cli.sacctmgr("add", "account", acct, f"Parent={parent}", f"Description={mark}")
                existing[acct] = (mark, "")
                self._limits[acct] = -1
                result.changed.append(acct)
            description, tres = existing[acct]
            why = self._why_not_ours(t.name, acct, description)
            if why is not None:
                result.refused[acct] = why
                continue
            if description != mark:  # an older gpupool's mark: the new one
                self._set(acct, f"Description={mark}")
                existing[acct] = (mark, tres)
                result.changed.append(acct)
            self._limits.setdefault(acct, _gpus_in(tres))
            limit = gpu_limit(t)
            if self._limits[acct] != limit:
                self._set(acct, f"GrpTRES=gres/gpu={limit}")
                self._limits[acct] = limit
                if acct not in result.changed:
                    result.changed.append(acct)
        self.refused = dict(result.refused)
        return result

    def _set(self, acct: str, setting: str) -> None:
        self.cli.sacctmgr("modify", "account", "where", f"name={acct}", "set", setting)

    def ensure_user(self, user: str, account: str) -> None:
        """The association of `user` with `account` (made once; an existing one is fine).
        `SlurmError` for an account the last sync refused."""
        if account in self.refused:
            raise SlurmError(self.refused[account])
        if (user, account) in self._users:
            return
        rows = self.cli.sacctmgr_list(
            "association", "where", f"user={user}", f"account={account}", "format=User"
        )
        if not rows:
            # Names=: a user called "where" or "set" is not one of sacctmgr's keywords
            self.cli.sacctmgr("add", "user", f"Names={user}", f"Account={account}")
        self._users.add((user, account))


def _gpus_in(tres: str) -> int:
    for part in tres.split(","):
        if part.startswith("gres/gpu="):
            return int(part.split("=", 1)[1])
    return -1
