"""The executor contract: where work runs.

An executor runs a workload's command on the resources of its allocation and reports what
happened. The server talks to every executor (local processes, Kubernetes pods, Slurm jobs,
the fakes used in tests) only through this contract:

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
  (a Kubernetes pod still Pending 30 s after its start): nothing of it runs any more, and
  the caller requeues the workload with the status's message (the start "did not take"
  after `start` had already returned, so a `StartError` could not say it).
- ``list_running()`` lists the work the executor sees alive right now, including work started
  by an earlier server process; the reconciler uses it to adopt jobs after a restart.
Optional capabilities are methods of `Executor` too, each with a documented default that
is the honest answer of an executor without the capability; callers call them directly
(no attribute probing, no type checks), and a wrapping executor forwards each one by name:

- ``log_chunks(workload_id, offset)`` and ``log_tail(workload_id, lines, max_bytes)`` read
  the work's output with bounded memory (default: `NotSupported`): the first as a lazy
  iterator of byte chunks from a byte offset, the second as the last lines, read from the
  end, at most `max_bytes` of them (gpupool.engines.common.logread). Both raise when they are
  called, not while iterating, so the caller can still answer with an error; ``logs`` is
  text built from them for tests and tools (the server never holds a whole log);
- ``enforcement_of(workload_id)`` tells the enforcement the executor really applied per GPU
  (default: None, nothing to correct: the executor applies what the allocation asks);
- ``mps_enforcement(gpu_uuid, unix_user)`` and ``mps_env(share)`` tell which enforcement a
  new fractional share would get now and the environment its processes need for CUDA MPS
  (default: ``policed`` and ``{}``, for executors that manage no MPS daemons);
- ``process_map()`` maps host process ids to the workloads they belong to (default: ``{}``,
  for executors whose work does not run on this host);
- ``pod_workloads()`` maps Kubernetes pod UIDs to the pods the executor knows: its own, with
  their workload, and others it listed, without one (default: ``{}``, for executors that run
  no pods); the server attributes agent-reported processes through it;
- ``run_times(workload_id)`` tells when the engine really started and ended the work (Slurm's
  own start and end of the job), for accounting (default: None, the allocation's times are
  the work's);
- ``slurm_job_workloads()`` maps Slurm job ids to gpupool's workloads: its own jobs, with their
  workload, and others it listed, without one (default: ``{}``, for executors that run no
  Slurm jobs); the server attributes agent-reported processes through it;
- ``prune(older_than_s)`` removes the kept state and logs of work that ended long ago
  (default: nothing kept, nothing removed);
- ``adopts_work``: whether work survives a server restart and ``list_running`` finds it
  again (default: False);
- ``refusal(workload)`` says why the executor would never run a workload, which the API then
  refuses at submit (default: None, it runs anything the scheduler admits);
- ``notebook_account(owner)`` names the Unix account and home a JupyterHub notebook of
  `owner` runs as when gpupool picks it (default: None, the hub's spawner decides), and
  ``one_account`` tells whether every user's work runs as one Unix account (default: False).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.common import logread


class ExecState(StrEnum):
    """What an executor knows of one workload."""

    STARTING = "starting"  # launched, not yet confirmed running (pod pulling, job queued)
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exited with code 0
    FAILED = "failed"  # exited non-zero or was killed by a signal
    LOST = "lost"  # known, but it vanished without a trace of how it ended
    #: the engine gave up starting it (a pod still Pending long after its start): nothing of
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

    `ref` is executor specific: a process id, a pod name, a Slurm job id.
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
    #: from the hub (a notebook in a pod or a Slurm job); None where not known or not served.
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
    #: Unix user (local), namespace (Kubernetes) or account (Slurm) the work runs as.
    user: str | None = None
    gpu_uuids: tuple[str, ...] = ()
    #: Process ids of the work on this host (local executor); empty elsewhere.
    pids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRef:
    """A Kubernetes pod an executor knows, by UID: `workload_id` None means a pod gpupool
    did not create (its processes are outside gpupool)."""

    namespace: str
    name: str
    workload_id: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


class Executor(ABC):
    """Runs workloads. See the module docstring for the contract of each method."""

    #: Short name recorded in handles and events: "local", "kubernetes", "slurm", "fake".
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

    # -- optional capabilities: each default is what an executor without it answers -------
    #: Work survives a server restart and `list_running` finds it again (to be adopted).
    adopts_work: bool = False
    #: Runs one workload across several nodes (a multi-node Allocation, `Request.nodes` > 1);
    #: without it the API refuses such requests at submit.
    multi_node: bool = False

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        """The workload's output from byte `offset` on, up to its size when called, lazily in
        chunks of at most `logread.CHUNK_BYTES` (no output yet: no chunks). Errors are raised
        by the call, not by the iteration. Default: `NotSupported`."""
        raise NotSupported(f"the {self.name} executor does not keep logs")

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        """The last `lines` lines of the workload's output, reading at most about `max_bytes`
        from its end; long lines cut with a marker (`logread.tail_of`). Default:
        `NotSupported`."""
        raise NotSupported(f"the {self.name} executor does not keep logs")

    def logs(self, workload_id: str, tail: int | None = None) -> str:
        """The output as text: the last `tail` lines (`log_tail`), or all of it, whole in
        memory (for tests and tools; the server streams `log_chunks` instead)."""
        if tail is not None:
            data = self.log_tail(workload_id, tail)
        else:
            data = b"".join(self.log_chunks(workload_id))
        return data.decode("utf-8", errors="replace")

    def enforcement_of(self, workload_id: str) -> Mapping[str, Enforcement] | None:
        """Enforcement applied per GPU UUID when the work was launched (may be weaker than
        the allocation asked); empty while the work is unknown (not launched yet). None (the
        default): this executor always applies exactly what it is asked, nothing to correct."""
        return None

    def mps_enforcement(self, gpu_uuid: str, unix_user: str | None = None) -> Enforcement:
        """The enforcement a new fractional share on `gpu_uuid` would get right now (`mps`
        only while a healthy daemon can serve `unix_user`). Default: `policed`."""
        return Enforcement.POLICED

    def mps_env(self, share: Share) -> Mapping[str, str]:
        """Environment a process needs to run on `share` under CUDA MPS with its limits
        (pipe and log directories, thread and memory limits). Default: none (no daemons)."""
        return {}

    def process_map(self) -> Mapping[int, str]:
        """Host process id -> workload id for every process of running work on this host.
        Default: empty (the executor's work does not run on this host)."""
        return {}

    def pod_workloads(self) -> Mapping[str, PodRef]:
        """Pod UID -> the pod and the workload it runs (None for pods gpupool did not
        create), as of the executor's last list. Default: empty (the executor runs no pods)."""
        return {}

    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        """(start, end) of the work as the engine ran it (end None while it runs, start None
        while it has not started); None (the default): this executor does not tell, the
        allocation's times are the work's."""
        return None

    def slurm_job_workloads(self) -> Mapping[str, str | None]:
        """Slurm job id -> the workload it runs (None: a Slurm job gpupool did not submit).
        Default: none (this executor runs no Slurm jobs)."""
        return {}

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Remove the kept state (and logs) of work that ended more than `older_than_s` ago;
        live work is kept. Returns the workload ids removed. Default: nothing is kept."""
        return []

    @property
    def one_account(self) -> bool:
        """Whether every user's work, notebooks included, runs as one Unix account (the
        local executor in single-user mode without root). Default: False."""
        return False

    def refusal(self, workload: Workload) -> str | None:
        """Why this executor will never run `workload` (the API refuses it at submit with
        this text, 403), or None. Default: None."""
        return None

    def notebook_account(self, owner: str) -> tuple[str, str] | None:
        """(Unix account, home) a JupyterHub notebook of `owner` runs as, when gpupool picks
        it (`StartError` if it cannot be had). Default: None, the hub's spawner decides."""
        return None


def exec_state_for_exit(exit_code: int | None) -> ExecState:
    """Succeeded for exit code 0, failed for anything else, lost when the code is unknown."""
    if exit_code is None:
        return ExecState.LOST
    return ExecState.SUCCEEDED if exit_code == 0 else ExecState.FAILED
