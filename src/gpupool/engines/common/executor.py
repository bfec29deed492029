"""The executor contract: where work runs.

An executor runs a workload's command on the resources of its allocation and reports what
happened. The server talks to every executor (each engine's, and the fakes used in tests)
only through this contract, which names no engine:

- ``start(workload, allocation)`` launches the work and returns a `Handle` at once (it never
  waits for the work to run). It raises `StartError` when the work could not be launched; the
  caller then rolls the admission back.
- ``poll(workload_id)`` says where the work stands: an `ExecStatus`. A workload the executor
  does not know (never started here, or forgotten) reads as `ExecState.UNKNOWN`; the caller
  decides (the reconciler marks it lost).
- ``stop(workload_id, reason, grace_s)`` asks the work to end: a polite signal now, a forced
  kill once ``grace_s`` seconds have passed on the executor's clock. It never blocks: the
  escalation happens in a later ``tick()`` (the reconciler calls it every pass). Stopping
  unknown or finished work is a no-op.
- ``poll`` may answer ``ExecState.REJECTED`` for work it launched but could not get running
  (still pending in the engine 30 s after its start): nothing of it runs any more, and
  the caller requeues the workload with the status's message (the start "did not take"
  after `start` had already returned, so a `StartError` could not say it).
- ``list_running()`` lists the work the executor sees alive right now, including work started
  by an earlier server process; the reconciler uses it to adopt jobs after a restart.

Optional powers are capability mixins (ABCs) an executor declares in its class bases; callers
check them with ``isinstance`` and, for an executor without one, fall back to the honest answer
of an engine without that power (no attribute probing). Each mixin's docstring is its contract
(`scripts/contract_table.py` renders the table of engines and their capabilities in
docs/executors.md from them):

- `ExecutorWithLogs`: keeps the work's output (``log_chunks``, ``log_tail``; ``logs`` for tests
  and tools). Without it the API answers that the engine keeps no logs (404).
- `ExecutorWithAdoption`: work survives a server restart and ``list_running`` finds it.
- `ExecutorWithMultiNode`: runs one workload across several nodes; without it the API refuses
  such requests at submit (422).
- `ExecutorWithSharedGPUs`: runs fractional shares of GPUs and tells the enforcement each got
  (``enforcement_of``; ``mps_enforcement``, ``mps_env`` where CUDA MPS serves them). Without
  it the executor applies exactly what the allocation asks (``policed`` for a fraction).
- `ExecutorWithNotebooks`: runs notebook workloads itself (the hub's single-user server
  command, as the account its rules pick) and reports where each listens
  (`ExecStatus.endpoint`); ``one_account`` tells whether every user's work shares one Unix
  account (the hub then serves one user only). Without it notebooks run as plain work.
- `ExecutorWithSubmitChecks`: refuses at submit what it would never run (``refusal``) and
  checks a notebook's engine template (``template_problem``). Without it nothing is refused
  and no template is taken.
- `ExecutorWithAttribution`: says who owns the containers the node agents saw
  (``owners(container_kind, ids)``, ``container_names``) and the processes of its work on this
  host (``process_map``). Without it a reported process is attributed by nothing but its
  Unix user.
- `ExecutorWithRunTimes`: tells when the engine really started and ended the work
  (``run_times``); without it accounting takes the allocation's times.
- `ExecutorWithPruning`: removes the kept state and logs of work that ended long ago
  (``prune``); without it nothing is kept, nothing removed.
- `ExecutorWithNodePools`: adds nodes to node pools when asked and gives idle ones back
  (``request_nodes``, ``withdraw``, ``release_node``, ``pool_states``). Without it node pools
  are not grown or shrunk by gpupool: their powered-down capacity is not counted as reachable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.domain.nodepools import NodePool, PoolNodeState, RequestState
from gpupool.engines.common import logread


class ExecState(StrEnum):
    """What an executor knows of one workload."""

    STARTING = "starting"  # launched, not yet confirmed running (image pulling, queued)
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exited with code 0
    FAILED = "failed"  # exited non-zero or was killed by a signal
    LOST = "lost"  # known, but it vanished without a trace of how it ended
    #: the engine gave up starting it (still pending there long after its start): nothing of
    #: it runs any more; the caller requeues the workload with `message` as the reason
    REJECTED = "rejected"
    UNKNOWN = "unknown"  # the executor has never heard of this workload

    @property
    def finished(self) -> bool:
        return self in (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)

    @property
    def alive(self) -> bool:
        return self in (ExecState.STARTING, ExecState.RUNNING)


class ExecutorError(Exception):
    """Base class for executor errors. The message says what happened and what to do."""


class StartError(ExecutorError):
    """The work could not be launched (bad command, no Unix account, engine refused it).

    `permanent`: retrying cannot help (the owner has no Unix account, the command is empty);
    the caller should fail the workload with this message instead of requeueing it.
    """

    def __init__(self, message: str, *, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


class NotSupported(ExecutorError):
    """The executor lacks an optional capability (e.g. logs)."""


@dataclass(frozen=True, slots=True)
class Handle:
    """What `start` returns: the executor's own reference to the launched work.

    `ref` is executor specific: a process id, a container's name, a cluster's job id.
    """

    workload_id: str
    executor: str
    ref: str
    started_at: float
    #: Enforcement the executor actually applied per GPU UUID (may be weaker than asked, e.g.
    #: `policed` when no healthy MPS daemon serves the GPU). Empty for CPU-only work.
    enforcement: Mapping[str, Enforcement] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExecStatus:
    """Where one workload stands, as the executor sees it."""

    workload_id: str
    state: ExecState
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    #: Human-readable detail ("killed by signal 9", "exit code file missing").
    message: str = ""
    #: The reason given to `stop`, once stop was asked for (None otherwise).
    stop_reason: str | None = None
    #: Where the workload's server listens ("http://host:port") once alive, for work run away
    #: from the hub (a notebook on a cluster node); None where not known or not served.
    endpoint: str | None = None

    @staticmethod
    def unknown(workload_id: str) -> ExecStatus:
        return ExecStatus(
            workload_id, ExecState.UNKNOWN, message="this executor does not know the workload"
        )


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """One piece of live work the executor sees (used to adopt work after a restart)."""

    workload_id: str
    ref: str
    started_at: float | None = None
    #: who the work runs as, in the engine's terms (a Unix user, a namespace, an account).
    user: str | None = None
    gpu_uuids: tuple[str, ...] = ()
    #: Process ids of the work on this host (work run here); empty elsewhere.
    pids: tuple[int, ...] = ()


class Executor(ABC):
    """Runs workloads: the methods every executor has (see the module docstring). Optional
    powers are the `ExecutorWith*` mixins below, declared in the executor's class bases."""

    #: Short name recorded in handles and events: the engine's name.
    name: str = "executor"

    @abstractmethod
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        """Launch `workload` on `allocation` (None for CPU-only work); return at once.

        `env` adds environment variables; `unix_user` is the account to run as when the
        executor can switch users (default: the workload's owner). Raises `StartError`.
        """

    @abstractmethod
    def poll(self, workload_id: str) -> ExecStatus:
        """Where the workload stands; `ExecState.UNKNOWN` if never seen."""

    @abstractmethod
    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        """Ask the workload to end; force it after `grace_s` (escalated by `tick`)."""

    @abstractmethod
    def list_running(self) -> list[RunningProcess]:
        """Work alive right now, including work started by an earlier server process."""

    def tick(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Housekeeping called by the reconciler each pass (e.g. escalate overdue stops)."""

    def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release executor resources on server shutdown. Running work keeps running."""


# -- capabilities: each an ABC mixin an executor declares in its bases ---------------------


class ExecutorWithLogs(ABC):
    """Keeps each workload's output and reads it back with bounded memory.

    ``log_chunks`` streams it from a byte offset, ``log_tail`` reads its last lines from the
    end (`gpupool.engines.common.logread`); both raise `ExecutorError` when called, never
    while iterating, so the caller can still answer with an error. The server never holds a
    whole log; ``logs`` is text for tests and tools."""

    @abstractmethod
    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        """The workload's output from byte `offset` on, up to its size when called, lazily in
        chunks of at most `logread.CHUNK_BYTES` (no output yet: no chunks)."""

    @abstractmethod
    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        """The last `lines` lines of the workload's output, reading at most about `max_bytes`
        from its end; long lines cut with a marker (`logread.tail_of`)."""

    def logs(self, workload_id: str, tail: int | None = None) -> str:
        """The output as text: the last `tail` lines (`log_tail`), or all of it, whole in
        memory (for tests and tools; the server streams `log_chunks` instead)."""
        if tail is not None:
            data = self.log_tail(workload_id, tail)
        else:
            data = b"".join(self.log_chunks(workload_id))
        return data.decode("utf-8", errors="replace")


def logs_of(executor: Executor) -> ExecutorWithLogs:
    """`executor` as one that keeps logs; `NotSupported` (the API's 404) if it keeps none."""
    if isinstance(executor, ExecutorWithLogs):
        return executor
    raise NotSupported(f"the {executor.name} executor does not keep logs")


class ExecutorWithAdoption(ABC):  # noqa: B024 - a promise about the base's methods
    """Work survives a restart of the server, to be adopted.

    A new executor's ``list_running`` and ``poll`` find the work an earlier one started, so
    the reconciler adopts it instead of losing it."""


class ExecutorWithMultiNode(ABC):  # noqa: B024 - a promise about `start`
    """Runs one workload across several nodes (a gang).

    ``start`` takes a multi-node `Allocation` (`Request.nodes` > 1) and runs the command
    once per node; its state is the whole gang's. Without it the API refuses such requests
    at submit."""


class ExecutorWithSharedGPUs(ABC):
    """Runs fractional shares of GPUs and tells the enforcement each really got.

    That may be weaker than the allocation asked (`policed` when no healthy MPS daemon
    serves a GPU). Without it the executor applies exactly what it is asked: nothing to
    correct."""

    @abstractmethod
    def enforcement_of(self, workload_id: str) -> Mapping[str, Enforcement] | None:
        """Enforcement applied per GPU UUID when the work was launched; empty while the work
        is unknown (not launched yet); None: nothing to correct for this workload."""

    def mps_enforcement(self, gpu_uuid: str, unix_user: str | None = None) -> Enforcement:
        """The enforcement a new fractional share on `gpu_uuid` would get right now (`mps`
        only while a healthy daemon can serve `unix_user`). Default: `policed` (no daemons)."""
        return Enforcement.POLICED

    def mps_env(self, share: Share) -> Mapping[str, str]:
        """Environment a process needs to run on `share` under CUDA MPS with its limits
        (pipe and log directories, thread and memory limits). Default: none (no daemons)."""
        return {}


class ExecutorWithNotebooks(ABC):
    """Runs JupyterHub's notebooks itself and reports where each listens.

    A `notebook` workload's command (the hub's single-user server, its environment in the
    workload's `env`) runs on the granted GPUs as the account the engine's rules pick, never
    root, and `poll` reports where it listens (`ExecStatus.endpoint`, ``http://host:port``)
    once it does; the hub's spawner waits for that over the API (gpupool.jupyterhub.spawner).

    Without it a notebook runs as plain work and reports no endpoint."""

    @property
    @abstractmethod
    def one_account(self) -> bool:
        """Whether every user's work, notebooks included, runs as one Unix account (the hub
        then serves one user only: gpupool.server.services.notebooks)."""


@dataclass(frozen=True, slots=True)
class TemplateProblem:
    """Why a notebook's engine template cannot run: `message` says what to change, `field`
    the part of the request it is about (a dotted path into the template; "": the template
    as a whole)."""

    message: str
    field: str = ""


class ExecutorWithSubmitChecks(ABC):
    """Refuses at submit what it would never run, with a reason the API returns (4xx).

    Without it the executor runs whatever the scheduler admits and takes no template."""

    @abstractmethod
    def refusal(self, workload: Workload) -> str | None:
        """Why this executor will never run `workload` (the API refuses it at submit with
        this text, 403), or None."""

    def template_problem(self, template: Mapping[str, Any], owner: str) -> TemplateProblem | None:
        """What is wrong with `template`, the engine's own description of a notebook of
        `owner` sent by the hub's spawner (the API refuses it, 422), or None: it runs as
        given. Default: this executor takes no template."""
        return TemplateProblem("this executor takes no notebook template; leave it out")


class ExecutorWithAttribution(ABC):
    """Says whose the processes on its nodes are, from what the hosts observe.

    The node agents report, per GPU process, the container the host saw it run in: its
    ``container_kind`` (the kinds are `gpupool.telemetry.containers.CONTAINER_KINDS`) and id.
    ``owners`` maps those ids to workloads; a process in a container gpupool did not start is
    outside gpupool, whatever its environment claims. Without it a reported process is
    attributed by nothing but its Unix user."""

    @abstractmethod
    def owners(self, container_kind: str, ids: Collection[str]) -> Mapping[str, str | None]:
        """For each of `ids` (containers of `container_kind`) this executor knows: the
        workload it runs, or None for a container gpupool did not start. Ids it does not
        know (and kinds it runs none of) are left out: they change nothing."""

    def container_names(self, container_kind: str, ids: Collection[str]) -> Mapping[str, str]:
        """A readable name (``namespace/name``) of each of `ids` it knows, shown with the
        processes in it. Default: none."""
        return {}

    def process_map(self) -> Mapping[int, str]:
        """Host process id -> workload id for every process of running work on this host.
        Default: empty (the executor's work does not run on this host)."""
        return {}


class ExecutorWithRunTimes(ABC):
    """Tells when the engine really started and ended the work, for accounting.

    A cluster's own start and end of a queued job count, not the allocation's. Without it
    the allocation's times are the work's."""

    @abstractmethod
    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        """(start, end) of the work as the engine ran it (end None while it runs, start None
        while it has not started); None: not known here, the allocation's times hold."""


class ExecutorWithPruning(ABC):
    """Keeps state and logs of ended work, and removes them once they are old.

    Without it nothing is kept, so nothing is removed."""

    @abstractmethod
    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Remove the kept state (and logs) of work that ended more than `older_than_s` ago
        on the executor's clock (`now` instead, for tests); live work is kept. Returns the
        workload ids removed."""


@dataclass(frozen=True, slots=True)
class PoolNodeStatus:
    """A node of a node pool as the engine sees it: its name (as the inventory names it once
    it is up), its pool, its state and the request (`request_nodes`'s id) it came for ("")."""

    name: str
    pool: str
    state: PoolNodeState
    request: str = ""


@dataclass(frozen=True, slots=True)
class NodeRequestStatus:
    """Where one request for nodes stands: `open` (its nodes are on their way),
    `fulfilled` (every node it asked for is up) or `withdrawn` (the engine gave up: `message`
    says why, e.g. "the cloud has no capacity for p5.48xlarge")."""

    request: str
    pool: str
    state: RequestState
    message: str = ""


@dataclass(frozen=True, slots=True)
class PoolStates:
    """What `pool_states` answers: the pools' nodes and the requests the engine still knows."""

    nodes: tuple[PoolNodeStatus, ...] = ()
    requests: tuple[NodeRequestStatus, ...] = ()


class ExecutorWithNodePools(ABC):
    """Grows and shrinks node pools (issue 34): asks the cluster's autoscaler (or power
    saving) for nodes of a pool and gives idle ones back. gpupool decides when and how many
    (gpupool.scheduler.autoscale); the engine only carries it out.

    A node belongs to pool P when the engine's inventory labels it `POOL_LABEL=P`
    (gpupool.domain.nodepools). Every method returns at once (no waiting for nodes to boot);
    the server loop (gpupool.server.loops.autoscale) calls ``pool_states`` every pass and
    withdraws requests that stay open past the pool's ``request_timeout_seconds``.

    Without it node pools are not grown or shrunk by gpupool."""

    @abstractmethod
    def request_nodes(
        self, pool: NodePool, count: int, for_workloads: Sequence[Workload], *, atomic: bool
    ) -> str:
        """Ask for `count` more nodes of `pool` for the waiting `for_workloads` (their
        requests are the shapes to serve; `atomic`: all `count` or none, for a gang). Returns
        the request's id (unique, stable across a restart of the server). Raises
        `ExecutorError` when the engine cannot ask (the caller retries next pass)."""

    @abstractmethod
    def withdraw(self, request: str) -> None:
        """Withdraw request `request` (it timed out, or the work no longer waits). Nodes that
        already came stay (they are given back through `release_node` when idle). Unknown or
        ended requests are a no-op."""

    @abstractmethod
    def release_node(self, node: str) -> None:
        """Give node `node` back (power it down, or let the autoscaler remove it); gpupool
        only asks for nodes it runs no work on. Unknown nodes are a no-op."""

    @abstractmethod
    def pool_states(self, pools: Sequence[NodePool]) -> PoolStates:
        """The nodes of `pools` the engine knows and their states, and the requests it still
        knows (open or ended recently)."""


#: every capability mixin, in the order docs/executors.md shows them
CAPABILITIES: tuple[type, ...] = (
    ExecutorWithLogs,
    ExecutorWithAdoption,
    ExecutorWithMultiNode,
    ExecutorWithSharedGPUs,
    ExecutorWithNotebooks,
    ExecutorWithSubmitChecks,
    ExecutorWithAttribution,
    ExecutorWithRunTimes,
    ExecutorWithPruning,
    ExecutorWithNodePools,
)


def exec_state_for_exit(exit_code: int | None) -> ExecState:
    """Succeeded for exit code 0, failed for anything else, lost when the code is unknown."""
    if exit_code is None:
        return ExecState.LOST
    return ExecState.SUCCEEDED if exit_code == 0 else ExecState.FAILED
