"""The engine contract: where work runs, where nodes and GPUs come from, where GPU readings
come from.

gpupool is assembled around one engine (`gpupool.system.build_system`):

- `open(env)` prepares the engine (finds the GPUs, starts its helpers) and returns its
  **executor** (`gpupool.engines.common.executor.Executor`): what runs workloads;
- `inventory()` is the **nodes** with their GPUs the engine offers now, registered in the
  store at start (the local engine: this host, through NVML or simulated GPUs; a cluster
  engine: its nodes, from the Kubernetes API or `sinfo --json`);
- `telemetry()` is the **GPU sources** this process samples, one per node (the local engine
  samples its own host in-process; a cluster engine's nodes report through agents instead);
- `mps()` is the CUDA MPS daemons the engine keeps for one node's `shared` GPUs, if any;
- `shared_enforcement` is what enforces fractional shares (`mps` or `policed`);
- `describe()` is what `gpupool up` prints about it.

Adding an engine is a folder of `gpupool.engines` (copy `engines/template/`) and one line in
`gpupool.engines.registry`; the scheduler, the API and the dashboard do not change.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from gpupool.clock import Clock
from gpupool.domain import Enforcement, Membership, Node, Tenant, TenantTree
from gpupool.engines.common.executor import Executor
from gpupool.telemetry import GPUSource


class MPSDaemons(Protocol):
    """The CUDA MPS daemons an engine keeps for one node's `shared` GPUs (the local engine's
    `MPSManager`); the reconciler keeps them equal to the node's shared GPUs."""

    def manage(self, gpu_uuids: Iterable[str]) -> None:
        """The GPUs that should have a daemon now; the others' are stopped."""

    def ensure_all(self) -> dict[str, bool]:
        """Start what is missing or crashed; GPU uuid -> healthy."""


class EngineError(Exception):
    """The engine cannot start as configured; the message says what to do."""


def _print(message: str, loud: bool = False) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class ExternalWork:
    """Work submitted through an engine's own API (a `kubectl apply`d Pod or Job) that
    gpupool queues like any other: `user` is who submitted it in the engine's terms
    (`EngineEnv.submit` maps it to a gpupool user: the same name if that user may submit to
    `tenant`, else the tenant's default submitter `<tenant's first segment>-default`),
    `command` names the object (recorded as the workload's command), the rest is its request.
    """

    tenant: str
    user: str
    engine: str
    name: str
    command: tuple[str, ...]
    gpus: int = 0
    gpu_model: str | None = None
    cpus: float = 0.0
    memory_mib: int = 0
    priority: int = 0
    #: False: preemption ends it for good (a deleted Pod cannot come back)
    requeue_on_preemption: bool = True
    #: the id the engine chose (written on the object at admission); submitting it again
    #: answers with the workload already made (None: a new id)
    workload_id: str | None = None


@dataclass(frozen=True)
class ExternalAnswer:
    """What `EngineEnv.submit` decided: the workload's id and owner (the mapped user)."""

    workload_id: str
    owner: str


def _no_submit(work: ExternalWork) -> ExternalAnswer:
    raise EngineError("this server takes no work from the engine's own API")


def _no_check(work: ExternalWork) -> None:
    raise EngineError("this server takes no work from the engine's own API")


@dataclass(frozen=True)
class EngineEnv:
    """What the system gives an engine when it opens it.

    data_dir: where the engine keeps state (job files, MPS pipes); None for engines that
        keep none (the fake engine of the tests).
    record(kind, message, data): add an event to the store (e.g. an MPS daemon restarted).
    say(message, loud=False): tell the operator (`gpupool up` prints it).
    tenants(): the tenants as stored now (an engine that mirrors them, e.g. as Slurm accounts).
    held(): the GPU uuids gpupool's active allocations hold now.
    notebook_template(workload_id): the engine's own template a notebook was submitted with
        (checked by `ExecutorWithSubmitChecks.template_problem`; None: none).
    submitter(): a `submit(work)` for one pass of the engine's intake: it queues
        `ExternalWork` as a workload, checked as the API checks a submission (raises the
        API's own `ValidationError` / `PermissionDenied` with its reason); the submissions of
        one `submitter()` share what the checks read (the nodes, read once), so take a new
        one each pass: it sees nothing changed after its first submission.
    check(work): the same checks as `submit`, read-only: nothing is queued or made.
    waiting(ids): why each of these pending workloads waits, as `gpupool queue` says it.
    withdraw(id, reason): cancel submitted work that is gone from the engine's API before it
        was admitted (a queued Pod deleted with kubectl); nothing when it is no longer pending.
    """

    clock: Clock
    data_dir: Path | None = None
    record: Callable[[str, str, Mapping[str, object]], None] = lambda kind, message, data: None
    say: Callable[..., None] = _print
    tenants: Callable[[], Sequence[Tenant]] = lambda: ()
    held: Callable[[], Collection[str]] = lambda: ()
    #: a notebook's engine template as its spawner submitted it (None: none), by workload id
    notebook_template: Callable[[str], Mapping[str, Any] | None] = lambda workload_id: None
    submitter: Callable[[], Callable[[ExternalWork], ExternalAnswer]] = lambda: _no_submit
    check: Callable[[ExternalWork], None] = _no_check
    waiting: Callable[[Collection[str]], Mapping[str, str]] = lambda ids: {}
    withdraw: Callable[[str, str], None] = lambda workload_id, reason: None


@dataclass(frozen=True)
class NodeTelemetry:
    """One node's GPUs as this process samples them. `kill(pid)` ends a process found where
    it must not be (None: the telemetry loop's default, SIGKILL or off a simulated GPU);
    `mps_daemons()` names the MPS server processes (pid -> GPU uuid) that are no job's;
    `police_unowned`: a process no workload owns on a held GPU is acted on (per-user mode)."""

    node: str
    source: GPUSource
    kill: Callable[[int], None] | None = None
    mps_daemons: Callable[[], Mapping[int, str]] | None = None
    police_unowned: bool = False


class Engine(ABC):
    """A cluster engine (see the module docstring). Open it once, close it on shutdown."""

    #: What `gpupool up --engine` calls it.
    name: str = "engine"
    #: The class of the executor `open` returns (every engine sets it): its `ExecutorWith*`
    #: mixins are the engine's powers (scripts/contract_table.py renders them).
    executor_class: ClassVar[type[Executor]]
    #: Re-read `inventory()` this often (seconds) and register what changed; None: the
    #: nodes are read once at start (the local engine: this host does not change).
    inventory_interval_s: float | None = None

    def inventory_due(self) -> bool:
        """Whether the inventory should be re-read now, before its interval is up (e.g. a
        pod stayed Pending: its node's capacity changed). Default: never."""
        return False

    def sync_tenants(self, tenants: TenantTree, memberships: Sequence[Membership]) -> None:
        """Make the engine's per-tenant objects match `tenants` and `memberships` (the
        kubernetes engine: namespaces, quotas, RoleBindings...). Called at start and on every
        inventory-loop pass; cheap when nothing changed. Default: nothing to do."""
        return None

    @abstractmethod
    def open(self, env: EngineEnv) -> Executor:
        """Prepare the engine and return its executor. Raises `EngineError`."""

    @abstractmethod
    def inventory(self) -> list[Node]:
        """The nodes (with their GPUs) this engine offers now; registered at start."""

    def telemetry(self) -> list[NodeTelemetry]:
        """The GPU sources this process samples. Default: none (nodes report by agents)."""
        return []

    def mps(self) -> tuple[MPSDaemons, str] | None:
        """The MPS daemons the engine keeps, with the node whose `shared` GPUs they serve
        (the reconciler keeps them up). Default: none."""
        return None

    @property
    def shared_enforcement(self) -> Enforcement:
        """What enforces fractional shares on `shared` GPUs. Default: policing."""
        return Enforcement.POLICED

    @property
    def single_user(self) -> bool:
        """Whether work runs without a directory of accounts (single-user mode: the server's
        own account, or with the local engine as root, accounts gpupool makes per user), not
        as its owners' existing accounts."""
        return True

    @property
    def notebook_command(self) -> list[str] | None:
        """The single-user notebook server as the engine's nodes run it (the command the
        hub's spawner submits); None: the hub's own (`jupyterhub-singleuser` of this Python)."""
        return None

    @property
    def jobs_account(self) -> str | None:
        """The unprivileged account single-user work runs as when it is not the server's own
        (gpupool runs as root); None otherwise."""
        return None

    def apply_mig_layout(self, node: str, gpu_uuid: str, layout: str) -> str | None:
        """Cut GPU `gpu_uuid` of `node` into MIG `layout` (the optional idle re-layout);
        None when done, else why not. Default: this engine changes no MIG layouts."""
        return (
            f"the {self.name} engine does not change MIG layouts; set them with nvidia-smi mig, "
            "mig-parted or the GPU Operator's MIG manager"
        )

    def describe(self) -> list[tuple[str, bool]]:
        """(line, loud) that `gpupool up` prints about this engine once it is open."""
        return []

    def reach_problems(self, notebook_command: Sequence[str] | None) -> list[str]:
        """Checked once open: what the accounts work runs as cannot run here, each naming
        the path, the account and the fix: ``python3`` for jobs and, when JupyterHub runs,
        `notebook_command` (its single-user server) for notebooks. Default: nothing checked
        (the engine's nodes are not this host)."""
        return []

    def follow(self, wake: Callable[[str], None]) -> None:  # noqa: B027 - optional hook
        """Start following the engine's own change feeds (the kubernetes engine's watches),
        calling `wake(loop name)` (e.g. "reconciler", "inventory") when something changed.
        Called once the server's loops run by themselves; not when tests drive them."""

    def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Stop the engine's helpers (not the work: running work keeps running)."""
