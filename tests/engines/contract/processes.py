"""Adapters of the engines that run real processes: the local engine on simulated GPUs (the
launcher, the job's own account, no GPU), and Slurm against the real daemons CI starts
(scripts/services.sh `start_slurm`; skipped with the reason elsewhere)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from gpupool.domain import Quota, Tenant
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.common.executor import Executor
from gpupool.engines.local.engine import LocalEngine, LocalOptions
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.engines.slurm.executor import PREFIX, SlurmExecutor
from gpupool.telemetry.containers import SLURM_JOB
from tests.engines.conftest import mkfifo, release
from tests.engines.contract.adapter import Behaviour, EngineUnderTest

#: the Slurm tests' members (tests/slurm/conftest.py makes the same Unix accounts)
SLURM_MEMBERS = {"lab": "slann", "other": "slbob"}
SLURM_TENANTS = [Tenant("lab", Quota.gpus(1, 4)), Tenant("other", Quota.gpus(1, 4))]


def slurm_missing() -> str | None:
    """Why the Slurm parametrisation cannot run here (None: it can)."""
    if not os.environ.get("GPUPOOL_TEST_SLURM"):
        return "no Slurm for the tests (scripts/test starts one as root: start_slurm)"
    if os.geteuid() != 0:
        return "the Slurm engine runs jobs as the members' own Unix accounts: root only"
    return None


class _Gated(EngineUnderTest):
    """Work "until release" reads a FIFO in `gates` (a dir every account reaches)."""

    every = 0.05
    privileged_here = True

    def __init__(self, gates: Path) -> None:
        super().__init__()
        self.gates = gates

    def command(self, wid: str, behaviour: Behaviour) -> tuple[str, ...]:
        gate = self.gates / wid
        if behaviour.until == "release" and not gate.exists():
            mkfifo(gate)
        return ("sh", "-c", behaviour.script(gate))

    def release(self, wid: str) -> None:
        super().release(wid)
        release(self.gates / wid)


class LocalUnderTest(_Gated):
    """The local engine on four simulated GPUs (`--simulate`), its state in `data_dir`;
    as root, each owner's jobs run as an account gpupool makes for them (throwaway ones:
    tests/engines/conftest.py)."""

    name = "local"

    def __init__(self, data_dir: Path, gates: Path) -> None:
        super().__init__(gates)
        self.data_dir = data_dir
        self.options = LocalOptions(simulate="4xH100-80GB", node="local-1", mps="off")
        self._open()

    def _open(self) -> None:
        self.engine = LocalEngine(self.options)
        self._ex = cast(LocalExecutor, self.engine.open(EngineEnv(self.clock, self.data_dir)))
        self._nodes = self.engine.inventory()

    @property
    def executor(self) -> Executor:
        return self._ex

    def nodes(self) -> list[str]:
        return [n.name for n in self._nodes]

    def gpu_uuid(self, node: str, index: int) -> str:
        return next(n for n in self._nodes if n.name == node).gpus[index].uuid

    def restart(self) -> Executor:
        self._ex.close()
        self.engine.close()
        self._open()
        return self._ex

    def _spec(self, wid: str) -> dict[str, Any]:
        return dict(json.loads((self._ex.state_dir / wid / "spec.json").read_text()))

    def place_of(self, wid: str) -> str | None:
        """The job's Unix account; None when not root (every job then runs as the server's
        own account, by design: single-user mode, docs/security.md)."""
        return str(self._spec(wid)["unix_user"]) if os.geteuid() == 0 else None

    def public_spec(self, wid: str) -> str:
        """The spec file and the argv of the launcher and of every process of the job."""
        pids = {int(self.started[wid].handle.ref), *self._ex.job_pids(wid)}
        argv = [_read(f"/proc/{pid}/cmdline").replace("\0", " ") for pid in sorted(pids)]
        return json.dumps(self._spec(wid)) + "\n" + "\n".join(argv)

    def pids(self, wid: str) -> set[int]:
        return set(self._ex.job_pids(wid))

    def privileged_envs(self) -> list[Mapping[str, str]]:
        """The environment of each live launcher (it runs as the server's account)."""
        out: list[Mapping[str, str]] = []
        for s in self.started.values():
            raw = _read(f"/proc/{s.handle.ref}/environ")
            if raw:
                out.append(dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv))
        return out


class SlurmUnderTest(_Gated):
    """The slurm engine against the real daemons, jobs as `SLURM_MEMBERS`' accounts, every
    Slurm command it runs recorded (`privileged_envs`); `stick` drains the node."""

    name = "slurm"
    cannot_reject = None
    cannot_bring_up = (
        "this Slurm has no powered-down node of the contract's pool (Slurm's power saving "
        "brings one up in tests/slurm/test_slurm_power.py, on the cloud setup of scripts/test)"
    )
    members = SLURM_MEMBERS
    every = 0.2

    def __init__(self, output_dir: Path, gates: Path) -> None:
        super().__init__(gates)
        for user in SLURM_MEMBERS.values():
            try:
                pwd.getpwnam(user)
            except KeyError:
                subprocess.run(["useradd", "-M", "-s", "/bin/sh", user], check=True)
        self.options = SlurmOptions(output_dir=output_dir, accounts_interval_s=0)
        self.commands: list[tuple[str, dict[str, str]]] = []
        self._drained = False
        self._open()

    def _run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append((argv[0], dict(kw.get("env") or {})))
        return subprocess.run(argv, **kw)

    def _open(self) -> None:
        cli = SlurmCLI(None, runner=self._run)
        self.engine = SlurmEngine(self.options, cli=cli, tenants=lambda: SLURM_TENANTS)
        self._ex = cast(SlurmExecutor, self.engine.open(EngineEnv(self.clock)))
        self._nodes = self.engine.inventory()

    @property
    def executor(self) -> Executor:
        return self._ex

    def nodes(self) -> list[str]:
        return [n.name for n in self._nodes if n.gpus]

    def gpu_uuid(self, node: str, index: int) -> str:
        return next(n for n in self._nodes if n.name == node).gpus[index].uuid

    def restart(self) -> Executor:
        self._ex.close()
        self.engine.close()
        self._open()
        return self._ex

    def _scontrol_node(self, state: str) -> None:
        for node in self.nodes()[:1]:
            args = ["scontrol", "update", f"NodeName={node}", f"State={state}"]
            self.engine.cli.run(args + (["Reason=gpupool-contract"] if state == "DRAIN" else []))

    def stick(self) -> None:
        self._scontrol_node("DRAIN")
        self._drained = True

    def unstick(self) -> None:
        if self._drained:
            self._scontrol_node("RESUME")
            self._drained = False

    def _job(self, wid: str) -> dict[str, Any]:
        return dict(self._ex.refresh().jobs[wid])

    def place_of(self, wid: str) -> str | None:
        return str(self._job(wid).get("account"))

    def place_for(self, tenant: str) -> str | None:
        return self.engine.accounts.account_of(tenant)

    def public_spec(self, wid: str) -> str:
        """What any user reads of the job: squeue's record and ``scontrol show job``."""
        job = self._job(wid)
        shown = self.engine.cli.run(["scontrol", "show", "job", str(job["job_id"])])
        return json.dumps(job) + "\n" + shown

    def containers(self, wid: str) -> tuple[str, list[str]] | None:
        return SLURM_JOB.name, [str(self._job(wid)["job_id"])]

    def nodes_of(self, wid: str) -> set[str] | None:
        return set(str(self._job(wid).get("nodes") or "").split(","))

    def privileged_envs(self) -> list[Mapping[str, str]]:
        """The environment of every Slurm command gpupool ran (sbatch among them)."""
        return [env for _, env in self.commands]

    def close(self) -> None:
        self.unstick()
        for wid in self.started:
            subprocess.run(["scancel", "--name", f"{PREFIX}{wid}"], capture_output=True)


def _read(path: str) -> str:
    try:
        return Path(path).read_bytes().decode(errors="replace")
    except OSError:
        return ""
