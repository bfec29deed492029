"""The local engine: work runs as processes on this host, on its GPUs.

GPUs are this host's, read through NVML, or simulated ones when asked (`simulate`, a spec
such as ``4xH100-80GB``) or when none exist (said loudly). The executor is
`gpupool.engines.local.executor.LocalExecutor`; fractional shares on `shared` GPUs are enforced by
CUDA MPS (`gpupool.engines.local.mps`) when the control program exists and the GPUs are real,
else by policing. Telemetry samples this host in the server's process.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.domain import Enforcement, Node, Share
from gpupool.engines.common.accounts import Account
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError, NodeTelemetry
from gpupool.engines.common.executor import Executor
from gpupool.engines.common.jobenv import job_environment
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.inventory import host_node, open_gpus
from gpupool.engines.local.isolation import (
    check_user_accounts,
    choose_jobs_account,
    isolation_lines,
)
from gpupool.engines.local.mps import MPSManager
from gpupool.engines.local.reach import RunAs, can_run, fix, which
from gpupool.telemetry import GPUSource

#: the account the start-up check runs as for accounts made on demand or not known here
ORDINARY_ACCOUNT = "nobody"


def ordinary_account() -> RunAs | None:
    """An account without special rights (`ORDINARY_ACCOUNT`: an ordinary uid, in no group
    of root's), standing for the accounts gpupool makes per user; None if it is missing."""
    try:
        return RunAs.named(ORDINARY_ACCOUNT)
    except KeyError:
        return None


def account_of(name: str) -> Account:
    import pwd

    return Account.of(pwd.getpwnam(name))


@dataclass(frozen=True)
class LocalOptions:
    """`gpupool up --engine local`'s choices for this host: each field with help is a flag
    (`gpupool.engines.common.options`; `gpupool up --help`)."""

    simulate: str | None = field(
        default=None,
        metadata={
            "flag": "--simulate",
            "metavar": "SPEC",
            "general": True,
            "help": "Use simulated GPUs, e.g. 4xH100-80GB or 2xH100-80GB,2xA100-40GB; "
            "H100-80GB:mig=all-1g.10gb has MIG mode on with that layout (docs/mig.md).",
        },
    )
    user_mode: str = field(
        default="auto",
        metadata={
            "flag": "--user-mode",
            "metavar": "MODE",
            "general": True,
            "help": "Who jobs and notebooks run as: per-user (each owner's existing Unix "
            "account; needs root), single-user (no directory of accounts: as root, an account "
            "gpupool makes for each user, gp-<name>; else the server's own, and JupyterHub "
            "serves the first admin only), or auto (per-user when root on real GPUs). Never "
            "root. See docs/security.md.",
        },
    )
    jobs_account: str | None = field(
        default=None,
        metadata={
            "flag": "--jobs-account",
            "metavar": "NAME",
            "general": True,
            "help": "Single-user mode as root: run every member's plain jobs as this one "
            "unprivileged account (created if missing; nobody if it cannot be) instead of "
            "each user's own. Members' jobs can then reach each other; notebooks keep their "
            "own accounts. Not recommended.",
        },
    )
    node: str = field(
        default_factory=socket.gethostname,
        metadata={
            "flag": "--node-name",
            "metavar": "NAME",
            "general": True,
            "show_default": False,
            "help": "Name of this machine in gpupool (default: the host name).",
        },
    )
    mps: str = field(
        default="auto",
        metadata={
            "flag": "--mps",
            "metavar": "on|off|auto",
            "help": "CUDA MPS for fractional shares on shared GPUs (auto: on when "
            "nvidia-cuda-mps-control exists and the GPUs are real).",
        },
    )
    mps_binary: str = field(
        default="nvidia-cuda-mps-control",
        metadata={"flag": "--mps-binary", "metavar": "PATH", "help": "The MPS control program."},
    )
    mps_service_account: str | None = field(
        default=None,
        metadata={
            "flag": "--mps-service-account",
            "metavar": "NAME",
            "help": "Run every job on shared GPUs as this Unix account so all of them get MPS.",
        },
    )


def _choose_user_mode(requested: str, simulated: bool) -> str:
    from gpupool.engines.local.executor import UserMode

    if requested not in ("auto", "per-user", "single-user"):
        raise EngineError(f"--user-mode must be auto, per-user or single-user, not {requested!r}")
    if requested == "auto":
        return str(
            UserMode.PER_USER if os.geteuid() == 0 and not simulated else UserMode.SINGLE_USER
        )
    if requested == "per-user" and os.geteuid() != 0:
        raise EngineError("--user-mode per-user needs gpupool to run as root; use single-user")
    return requested


def _choose_mps(requested: str, binary: str, simulated: bool) -> bool:
    if requested not in ("auto", "on", "off"):
        raise EngineError(f"--mps must be auto, on or off, not {requested!r}")
    found = shutil.which(binary) is not None
    if requested == "on" and not found:
        raise EngineError(f"--mps on, but {binary!r} was not found; install it or use --mps off")
    return requested == "on" or (requested == "auto" and found and not simulated)


def mps_base(data_dir: Path) -> Path:
    """Where MPS pipe directories go. Jobs of other Unix accounts must reach them (a client
    that cannot reach its pipe directory silently runs without MPS, i.e. without limits), so
    when gpupool runs as root (jobs then run as other accounts, in either mode) they live in
    /run/gpupool/<data dir hash>/mps (world-traversable), not in the private data dir."""
    if os.geteuid() != 0:
        return data_dir / "mps"
    import hashlib

    tag = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]  # one per data dir
    base = Path("/run/gpupool") / tag / "mps"
    base.mkdir(parents=True, exist_ok=True)
    for d in (base.parent.parent, base.parent, base):
        d.chmod(0o755)
    return base


class LocalEngine(Engine):
    """This host: NVML (or simulated) GPUs, the local executor, MPS. See the module."""

    name = "local"
    executor_class = LocalExecutor

    def __init__(self, options: LocalOptions) -> None:
        self.options = options
        self.source: GPUSource | None = None
        self.spec: str | None = None
        self.simulated = False
        self.user_mode = "single-user"
        self.use_mps = False
        self.run_as: str | None = None
        self.manager: MPSManager | None = None
        self.executor: LocalExecutor | None = None
        self._nodes: list[Node] = []

    def open(self, env: EngineEnv) -> Executor:
        o = self.options
        if env.data_dir is None:
            raise EngineError("the local engine needs a data directory (--data-dir)")
        self.source, self.spec = open_gpus(o.simulate, o.node, env)
        self.simulated = self.source.simulated
        self.user_mode = _choose_user_mode(o.user_mode, self.simulated)
        self.use_mps = _choose_mps(o.mps, o.mps_binary, self.simulated)
        self.run_as, account_warning = choose_jobs_account(self.user_mode, o.jobs_account)
        cannot = check_user_accounts(self.user_mode)
        if cannot is not None and self.run_as is None:
            raise EngineError(cannot)
        if account_warning:
            env.say(f"gpupool: warning: {account_warning}", loud=True)
        if self.simulated:
            env.say(f"*** SIMULATED GPUs ({self.spec}): not real hardware ***", loud=True)
        if self.use_mps:
            self.manager = MPSManager(
                mps_base(env.data_dir),
                binary=o.mps_binary,
                service_account=o.mps_service_account,
                on_event=env.record,
            )
        self.executor = LocalExecutor(
            env.data_dir / "jobs",
            clock=env.clock,
            user_mode=self.user_mode,
            mps=self.manager,
            jobs_account=self.run_as,
            mig_uuid=self._mig_uuid,
        )
        return self.executor

    def apply_mig_layout(self, node: str, gpu_uuid: str, layout: str) -> str | None:
        """Simulated GPUs take the new layout; real ones never: gpupool does not change the
        MIG mode or instances of real GPUs."""
        from gpupool.telemetry.simulated import SimulatedSource

        src = self.source
        if not isinstance(src, SimulatedSource):
            return (
                "gpupool never changes the MIG instances of real GPUs; create them with "
                "nvidia-smi mig or mig-parted, then set the layout (gpupool gpu mig-layout)"
            )
        for g in src.snapshot().gpus:
            if g.uuid == gpu_uuid:
                src.set_mig(g.index, layout)
                return None
        return f"no GPU {gpu_uuid} on this host"

    def _mig_uuid(self, share: Share) -> str | None:
        """The MIG device (UUID) of a MIG instance share, as NVML lists it now."""
        from gpupool.telemetry.snapshots import mig_device_uuid

        assert self.source is not None
        for g in self.source.snapshot().gpus:
            if g.uuid == share.gpu_uuid:
                return mig_device_uuid(g, share.mig_profile, share.mig_start)
        return None

    def inventory(self) -> list[Node]:
        assert self.source is not None, "open the engine first"
        self._nodes = [host_node(self.options.node, self.source)]
        return self._nodes

    def telemetry(self) -> list[NodeTelemetry]:
        assert self.source is not None, "open the engine first"
        return [
            NodeTelemetry(
                self.options.node,
                self.source,
                mps_daemons=self.manager.daemons if self.manager is not None else None,
                police_unowned=self.user_mode == "per-user",
            )
        ]

    def mps(self) -> tuple[MPSManager, str] | None:
        return (self.manager, self.options.node) if self.manager is not None else None

    @property
    def shared_enforcement(self) -> Enforcement:
        return Enforcement.MPS if self.use_mps else Enforcement.POLICED

    @property
    def single_user(self) -> bool:
        return self.user_mode == "single-user"

    @property
    def jobs_account(self) -> str | None:
        return self.run_as

    def describe(self) -> list[tuple[str, bool]]:
        node = (self._nodes or self.inventory())[0]
        lines = [
            (
                f"gpupool: node {node.name} with {len(node.gpus)} GPU(s): "
                + ", ".join(f"{g.index}:{g.model}" for g in node.gpus),
                False,
            )
        ]
        loud = self.user_mode == "single-user" and (os.geteuid() != 0 or self.run_as is not None)
        lines += [(line, loud) for line in isolation_lines(self.user_mode, self.run_as)]
        cgroups = self.executor is not None and self.executor.cgroup_root is not None
        tracking = "cgroup, " if cgroups else ""
        lines.append(
            (
                f"gpupool: a job's processes are tracked by {tracking}process group, session "
                "and marker",
                False,
            )
        )
        lines.append(
            (
                "gpupool: fractional shares are enforced by "
                f"{'CUDA MPS' if self.use_mps else 'policing'}",
                False,
            )
        )
        return lines

    def reach_problems(self, notebook_command: Sequence[str] | None) -> list[str]:
        """As root, jobs and notebooks run as other accounts, which may not reach this
        server's Python (a venv or pyenv under /root): run ``python3 -c pass`` as the jobs'
        account and the notebook command with ``--version`` as an account without special
        rights (`ordinary_account`: the per-user accounts gpupool makes, and users' own
        accounts, are ordinary ones), as the launcher starts them."""
        if os.geteuid() != 0:
            return []  # work runs as this server's own account, which runs this Python
        ordinary = ordinary_account()
        if ordinary is None:
            return []
        jobs = RunAs.named(self.run_as) if self.run_as else ordinary
        checks = [("jobs", jobs, ["python3", "-c", "pass"])]
        if notebook_command:
            checks.append(("notebooks", ordinary, [*notebook_command, "--version"]))
        problems = []
        for what, account, argv in checks:
            env = job_environment(os.environ, account_of(account.name), injected={})
            why = can_run(argv, account, env)
            if why is None:
                continue
            where = which(argv[0], env.get("PATH", ""))
            todo = (
                f"Fix: {fix(where)}"
                if where is not None
                else f"Install {argv[0]} where {account.name} finds it (PATH={env['PATH']})"
            )
            problems.append(
                f"{what} cannot start: {' '.join(argv)} fails as {account.name}, an account "
                f"without special rights like those {what} run as: {why}. {todo}"
            )
        return problems

    def close(self) -> None:
        if self.manager is not None:
            self.manager.stop_all()
            if self.manager.base_dir.is_relative_to("/run/gpupool"):  # this data dir's
                shutil.rmtree(self.manager.base_dir.parent, ignore_errors=True)
        if self.source is not None:
            self.source.close()
