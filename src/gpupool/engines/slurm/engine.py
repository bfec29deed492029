"""The Slurm engine: nodes from Slurm, work as Slurm batch jobs, tenants as Slurm accounts.

`SlurmEngine(SlurmOptions(...))`:

- `inventory()`: `sinfo --json` → nodes and GPUs (`inventory.to_node`); GPUs held by Slurm jobs
  gpupool did not submit are used outside gpupool (`GPU.outside`: healthy, not schedulable,
  naming the job and its user) and each such job is
  recorded once as an event ``slurm.foreign`` (job, user, account, node, GPUs). Nodes with
  ``gres/shard`` are labelled with their shards per GPU (`shards`). Re-read every
  `inventory_interval_s` by the system's inventory loop.
- `open()`: the `SlurmExecutor`; its `tick` (every reconciler pass) also syncs tenants to
  Slurm accounts (`accounts.SlurmAccounts`) every `accounts_interval_s` on the clock, reading
  the tenants from the store given in the options' `tenants` callable (the system passes
  the store's tenant list). An account gpupool refuses (another tenant's, or not made by
  gpupool) is recorded once as an event ``slurm.account_refused`` saying what to do.
- no telemetry in this process: compute nodes report through `gpupool agent`.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.domain import Enforcement, Node, Tenant
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError
from gpupool.engines.common.executor import Executor
from gpupool.engines.slurm.accounts import DEFAULT_PREFIX, SlurmAccounts
from gpupool.engines.slurm.cli import SlurmCLI, SlurmError
from gpupool.engines.slurm.executor import PREFIX, SlurmExecutor
from gpupool.engines.slurm.inventory import (
    ForeignJob,
    foreign_jobs,
    mark_foreign,
    to_node,
    with_shards,
)
from gpupool.engines.slurm.output import default_output_dir, refusal, unreachable
from gpupool.engines.slurm.shards import SHARD_ENFORCEMENT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlurmOptions:
    """`gpupool up --engine slurm`'s choices; fields with help are its flags
    (``--slurm-<field>``). conf: slurm.conf (default $SLURM_CONF). output_dir: where jobs'
    output files go (must be on a file system the compute nodes share, reachable by the
    jobs' accounts; default `output.default_output_dir`: /var/lib/gpupool-slurm/output as
    root). partition: submit there (default: Slurm's default). account_prefix: see
    `accounts`. pending_timeout_s: a job still pending this long after its start is requeued
    in gpupool. notebook_command: the single-user notebook server on the compute nodes (with
    JupyterHub).
    """

    conf: str | None = None
    partition: str | None = field(
        default=None,
        metadata={
            "metavar": "NAME",
            "help": "Submit to this partition (default: Slurm's default).",
        },
    )
    output_dir: Path | None = field(
        default=None,
        metadata={
            "metavar": "DIR",
            "help": "Jobs' output files, on a file system the compute nodes share (default: "
            "/var/lib/gpupool-slurm/output as root, else <data dir>/../gpupool-slurm-output).",
        },
    )
    account_prefix: str = DEFAULT_PREFIX
    pending_timeout_s: float = 30.0
    inventory_interval_s: float = 5.0
    accounts_interval_s: float = 30.0
    default_gpu_memory_mib: int = 16384
    per_user: bool | None = None
    #: the single-user notebook server on the compute nodes (a shell-style command line)
    notebook_command: str | None = field(
        default=None,
        metadata={
            "metavar": "CMD",
            "help": "With JupyterHub: the single-user notebook server as the compute nodes run "
            "it (default: this Python's jupyterhub-singleuser, which must then exist at the "
            "same path there).",
        },
    )


class SlurmEngine(Engine):
    name = "slurm"
    executor_class = SlurmExecutor

    def __init__(
        self,
        options: SlurmOptions | None = None,
        *,
        cli: SlurmCLI | None = None,
        tenants: Callable[[], Sequence[Tenant]] | None = None,
    ) -> None:
        self.options = options or SlurmOptions()
        self.cli = cli or SlurmCLI(self.options.conf)
        self.accounts = SlurmAccounts(self.cli, self.options.account_prefix)
        #: the tenants to mirror as accounts (the system sets it to the store's list)
        self.tenants = tenants
        self.inventory_interval_s = self.options.inventory_interval_s
        self.executor: SlurmExecutor | None = None
        self._env: EngineEnv | None = None
        self._foreign_seen: set[str] = set()
        self._synced_at: float | None = None
        #: refused accounts already recorded (account -> why)
        self._refused_told: dict[str, str] = {}

    @property
    def notebook_command(self) -> list[str] | None:
        cmd = self.options.notebook_command
        return shlex.split(cmd) if cmd else None

    @property
    def shared_enforcement(self) -> Enforcement:
        """Fractions run on gres/shard: Slurm counts them and enforces nothing."""
        return SHARD_ENFORCEMENT

    @property
    def single_user(self) -> bool:
        return not (self.executor.per_user if self.executor else os.geteuid() == 0)

    def open(self, env: EngineEnv) -> Executor:
        self._env = env
        try:
            major, minor = self.cli.version()
        except SlurmError as e:
            raise EngineError(f"cannot use Slurm: {e}") from None
        if (major, minor) < (21, 8):
            raise EngineError(f"Slurm {major}.{minor} has no --json output; 21.08 or later needed")
        as_root = os.geteuid() == 0  # jobs run as other accounts (`output`)
        out = self.options.output_dir or default_output_dir(env.data_dir, as_root)
        try:
            out.mkdir(mode=0o711, parents=True, exist_ok=True)  # the executor makes it 0711
        except OSError as e:
            raise EngineError(f"cannot make the Slurm jobs' output directory: {e}") from None
        blocker = unreachable(out.parent) if as_root else None
        if blocker is not None:
            raise EngineError(refusal(out, blocker))
        self.executor = SlurmExecutor(
            self.cli,
            env.clock,
            out,
            account_of=self.accounts.account_of,
            ensure_user=self.ensure_user,
            per_user=self.options.per_user,
            partition=self.options.partition,
            pending_timeout_s=self.options.pending_timeout_s,
            sync=self.sync_accounts,
        )
        self.executor.whole_enforcement = self.whole_gpu_enforcement()
        self.inventory()  # fail early, and teach the executor the GPU types
        self.sync_accounts(force=True)
        return self.executor

    def whole_gpu_enforcement(self) -> Enforcement:
        """What keeps a job off the node's GPUs it was not given: `hardware` where Slurm's
        task/cgroup plugin constrains devices (``TaskPlugin`` has ``task/cgroup`` and
        cgroup.conf has ``ConstrainDevices=yes``), else `none` (``CUDA_VISIBLE_DEVICES``
        only, and no gpupool process polices the nodes). Read from `scontrol show config`;
        `none` when it cannot be read."""
        try:
            conf = self.cli.config()
        except SlurmError as e:
            log.warning("cannot read Slurm's config (GPUs labelled 'none'): %s", e)
            return Enforcement.NONE
        cgroup = "task/cgroup" in conf.get("TaskPlugin", "")
        devices = conf.get("ConstrainDevices", "").lower() == "yes"
        return Enforcement.HARDWARE if cgroup and devices else Enforcement.NONE

    def ensure_user(self, user: str, account: str) -> None:
        """`user`'s association with `account`; a missing account (a tenant made since the
        last sync) is synced first."""
        try:
            self.accounts.ensure_user(user, account)
        except SlurmError:
            self.sync_accounts(force=True)
            self.accounts.ensure_user(user, account)

    def sync_accounts(self, force: bool = False) -> list[str]:
        """Mirror the tenants as accounts, at most every `accounts_interval_s` (unless
        `force`); the accounts changed. Errors are recorded, not raised."""
        if self._env is None:
            return []
        tenants = self.tenants or self._env.tenants
        now = self._env.clock.now()
        due = self._synced_at is None or now - self._synced_at >= self.options.accounts_interval_s
        if not (force or due):
            return []
        self._synced_at = now
        try:
            result = self.accounts.sync(tenants())
        except SlurmError as e:
            self._env.record("slurm.accounts", f"syncing tenants to Slurm failed: {e}", {})
            return []
        changed = result.changed
        if changed:
            self._env.record(
                "slurm.accounts",
                f"Slurm accounts updated: {', '.join(changed)}",
                {"accounts": changed},
            )
        for acct, why in result.refused.items():
            if self._refused_told.get(acct) != why:  # once per account and reason
                log.warning("%s", why)
                self._env.record("slurm.account_refused", why, {"account": acct})
        self._refused_told = dict(result.refused)
        return changed

    def foreign(self) -> list[ForeignJob]:
        """Running Slurm jobs gpupool did not submit that hold GPUs."""
        return foreign_jobs(self.cli.jobs(), PREFIX)

    def inventory(self) -> list[Node]:
        try:
            raw = self.cli.nodes()
            foreign = self.foreign()
        except SlurmError as e:
            raise EngineError(f"cannot read Slurm's nodes: {e}") from None
        held = set(self._env.held()) if self._env else set()  # survives a restart
        if self.executor is not None:
            held |= self.executor.held_gpus()
        nodes = []
        for r in raw:
            node, shards = with_shards(to_node(r, self.options.default_gpu_memory_mib), r)
            if self.executor is not None:
                for g in node.gpus:
                    self.executor.gpu_types[g.uuid] = g.model
                self.executor.shards_per_gpu[node.name] = shards
                self.executor.node_addresses[node.name] = str(r.get("address") or node.name)
            nodes.append(mark_foreign(node, foreign, held))
        self._note_foreign(foreign)
        return nodes

    def _note_foreign(self, foreign: list[ForeignJob]) -> None:
        if self._env is None:
            return
        for f in foreign:
            if f.job_id in self._foreign_seen:
                continue
            self._foreign_seen.add(f.job_id)
            self._env.record(
                "slurm.foreign",
                f"Slurm job {f.job_id} of {f.user} (account {f.account or '-'}) holds "
                f"{f.gpus} GPU(s) on {f.node} outside gpupool",
                {
                    "job": f.job_id,
                    "user": f.user,
                    "account": f.account,
                    "node": f.node,
                    "gpus": f.gpus,
                },
            )
        self._foreign_seen &= {f.job_id for f in foreign}

    def describe(self) -> list[tuple[str, bool]]:
        major, minor = self.cli.version()
        who = "their owners' Unix accounts" if not self.single_user else "this server's account"
        return [
            (f"engine: slurm {major}.{minor} (SLURM_CONF={self.cli.conf or 'default'})", False),
            (
                f"jobs run as Slurm batch jobs under {who}; tenants are Slurm accounts "
                f"'{self.options.account_prefix}<tenant>'",
                False,
            ),
        ]
