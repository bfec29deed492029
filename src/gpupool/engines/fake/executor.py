"""The fake executor family, for tests and the simulator. Deterministic, no processes, no sleeps.

- `FakeExecutor`: work runs at once; tests script its end with `finish()`, `lose()`, `forget()`.
  It has the capabilities a cluster engine has (logs, adoption, multi-node, shared GPUs,
  attribution, run times, node pools), each scriptable: `downgrade`, `containers`, `times`,
  `cloud` (gpupool.engines.fake.nodepools).
- `OneNodeExecutor`: the same on one node only (no `ExecutorWithMultiNode`).
- `SlowExecutor`: work stays `starting` until `release(workload_id)`.
- `NeverStarts`: work stays `starting` forever.
- `FailingExecutor`: `start` raises `StartError` (always, or the first `failures` times).

The live work sits in a `FakeWorld` that outlives an executor: `executor.reborn()` returns a
fresh executor over the same world, as a restarted server sees the same processes.
Stops follow the contract: `stop` sends a polite signal; work that `ignores_term` keeps
running until `tick()` runs after `grace_s` on the injected clock, then is killed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Self

from gpupool.clock import Clock
from gpupool.domain import Allocation, Enforcement, Workload
from gpupool.engines.common import logread, reruns
from gpupool.engines.common.executor import (
    ExecState,
    ExecStatus,
    Executor,
    ExecutorWithAdoption,
    ExecutorWithAttribution,
    ExecutorWithLogs,
    ExecutorWithMultiNode,
    ExecutorWithRunTimes,
    ExecutorWithSharedGPUs,
    Handle,
    RunningProcess,
    StartError,
    exec_state_for_exit,
)
from gpupool.engines.fake.nodepools import FakeCloud, FakeNodePools

SIGTERM_EXIT = 128 + 15
SIGKILL_EXIT = 128 + 9


@dataclass
class FakeProcess:
    """One piece of fake work. Mutable: tests may inspect it."""

    workload: Workload
    allocation: Allocation | None
    ref: str
    state: ExecState
    started_at: float
    env: dict[str, str] = field(default_factory=dict)
    unix_user: str | None = None
    exit_code: int | None = None
    finished_at: float | None = None
    stop_reason: str | None = None
    kill_at: float | None = None
    output: list[str] = field(default_factory=list)
    enforcement: dict[str, Enforcement] = field(default_factory=dict)
    #: where its server listens, as `poll` reports it (None: not a server, or not yet)
    endpoint: str | None = None


@dataclass
class FakeWorld:
    """The processes that outlive any one executor object."""

    processes: dict[str, FakeProcess] = field(default_factory=dict)
    #: Every start call that launched work, in order (workload ids); duplicates show here.
    launches: list[str] = field(default_factory=list)
    next_ref: int = 1000
    #: the node pools' nodes and requests (gpupool.engines.fake.nodepools)
    cloud: FakeCloud = field(default_factory=FakeCloud)


class _Fake(
    Executor,
    ExecutorWithLogs,
    ExecutorWithAdoption,
    ExecutorWithSharedGPUs,
    ExecutorWithAttribution,
    ExecutorWithRunTimes,
):
    """Scriptable in-memory executor. Work is `running` as soon as it is started."""

    name = "fake"
    start_state = ExecState.RUNNING

    def __init__(
        self, clock: Clock, *, world: FakeWorld | None = None, ignores_term: bool = False
    ) -> None:
        self.clock = clock
        self.world = world if world is not None else FakeWorld()
        #: When True, work ignores the polite stop signal and needs the forced kill.
        self.ignores_term = ignores_term
        #: Every stop call: (workload_id, reason, grace_s).
        self.stop_calls: list[tuple[str, str, float]] = []
        #: GPU uuid -> enforcement to apply instead of the share's (a weaker fallback, as
        #: the local executor does when no healthy MPS daemon can serve a job).
        self.downgrade: dict[str, Enforcement] = {}
        #: container kind -> container id -> the workload it runs (None: not gpupool's), as
        #: a cluster engine knows the containers the node agents report (`owners`)
        self.containers: dict[str, dict[str, str | None]] = {}
        #: workload id -> (start, end) as the engine ran it (`run_times`; absent: not told)
        self.times: dict[str, tuple[float | None, float | None]] = {}

    @property
    def cloud(self) -> FakeCloud:
        """The world's node pools (`FakeNodePools` acts on them)."""
        return self.world.cloud

    # -- contract ------------------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        existing = self.world.processes.get(workload.id)
        if existing is not None and existing.state.alive:
            raise StartError(f"workload {workload.id} is already running (ref {existing.ref})")
        ref = str(self.world.next_ref)
        self.world.next_ref += 1
        now = self.clock.now()
        full_env = dict(env or {})
        full_env["GPUPOOL_WORKLOAD_ID"] = workload.id
        if allocation is not None and allocation.shares:
            full_env["CUDA_VISIBLE_DEVICES"] = ",".join(allocation.gpu_uuids)
        # a rerun keeps the earlier runs' output, then a separator line (as the local one)
        output = [] if existing is None else ["".join(existing.output)]
        if existing is not None and output[0]:
            sep = reruns.separator(workload, now, existing.finished_at).decode()
            output.append(sep if output[0].endswith("\n") else "\n" + sep)
        self.world.processes[workload.id] = FakeProcess(
            workload=workload,
            allocation=allocation,
            ref=ref,
            state=self.start_state,
            started_at=now,
            env=full_env,
            unix_user=unix_user or workload.owner,
            output=output,
        )
        self.world.launches.append(workload.id)
        enforcement = (
            {s.gpu_uuid: self.downgrade.get(s.gpu_uuid, s.enforcement) for s in allocation.shares}
            if allocation
            else {}
        )
        self.world.processes[workload.id].enforcement = enforcement
        return Handle(workload.id, self.name, ref, now, enforcement)

    def poll(self, workload_id: str) -> ExecStatus:
        p = self.world.processes.get(workload_id)
        if p is None:
            return ExecStatus.unknown(workload_id)
        return ExecStatus(
            workload_id,
            p.state,
            exit_code=p.exit_code,
            started_at=p.started_at,
            finished_at=p.finished_at,
            message=_message(p),
            stop_reason=p.stop_reason,
            endpoint=p.endpoint if p.state.alive else None,
        )

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        self.stop_calls.append((workload_id, reason, grace_s))
        p = self.world.processes.get(workload_id)
        if p is None or not p.state.alive:
            return
        if p.stop_reason is None:
            p.stop_reason = reason
            p.kill_at = self.clock.now() + max(0.0, grace_s)
        if not self.ignores_term:
            self._end(p, SIGTERM_EXIT)
        elif grace_s <= 0:
            self._end(p, SIGKILL_EXIT)

    def tick(self) -> None:
        now = self.clock.now()
        for p in self.world.processes.values():
            if p.state.alive and p.kill_at is not None and now >= p.kill_at:
                self._end(p, SIGKILL_EXIT)

    def list_running(self) -> list[RunningProcess]:
        return [
            RunningProcess(
                workload_id=p.workload.id,
                ref=p.ref,
                started_at=p.started_at,
                user=p.unix_user,
                gpu_uuids=p.allocation.gpu_uuids if p.allocation else (),
            )
            for p in self.world.processes.values()
            if p.state.alive
        ]

    def _output(self, workload_id: str) -> bytes:
        p = self.world.processes.get(workload_id)
        return "".join(p.output).encode() if p is not None else b""

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        return logread.rechunk(self._output(workload_id)[max(0, offset) :])

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        data = self._output(workload_id)
        start = max(0, len(data) - max_bytes)
        return logread.tail_of(data[start:], lines, starts_mid_line=start > 0)

    def enforcement_of(self, workload_id: str) -> dict[str, Enforcement]:
        """Enforcement applied at start, per GPU UUID (empty if unknown)."""
        p = self.world.processes.get(workload_id)
        return dict(p.enforcement) if p is not None else {}

    def owners(self, container_kind: str, ids: Collection[str]) -> dict[str, str | None]:
        known = self.containers.get(container_kind, {})
        return {i: known[i] for i in ids if i in known}

    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        return self.times.get(workload_id)

    # -- scripting for tests ---------------------------------------------------------------
    def process(self, workload_id: str) -> FakeProcess:
        return self.world.processes[workload_id]

    def finish(self, workload_id: str, exit_code: int = 0) -> None:
        """The work exits with `exit_code`."""
        self._end(self.world.processes[workload_id], exit_code)

    def set_running(self, workload_id: str) -> None:
        p = self.world.processes[workload_id]
        if p.state is ExecState.STARTING:
            p.state = ExecState.RUNNING

    def lose(self, workload_id: str) -> None:
        """The work vanishes without an exit code (node died, state dir wiped)."""
        p = self.world.processes[workload_id]
        p.state = ExecState.LOST
        p.finished_at = self.clock.now()

    def forget(self, workload_id: str) -> None:
        """The executor no longer knows the work at all (poll says unknown)."""
        self.world.processes.pop(workload_id, None)

    def write_log(self, workload_id: str, text: str) -> None:
        self.world.processes[workload_id].output.append(text)

    def launches_of(self, workload_id: str) -> int:
        """How many times `workload_id` was launched (a restart must not relaunch work)."""
        return self.world.launches.count(workload_id)

    def reborn(self) -> Self:
        """A new executor of the same kind over the same world (a restarted server)."""
        return type(self)(self.clock, world=self.world, ignores_term=self.ignores_term)

    def _end(self, p: FakeProcess, exit_code: int | None) -> None:
        if not p.state.alive:
            return
        p.exit_code = exit_code
        p.state = exec_state_for_exit(exit_code)
        p.finished_at = self.clock.now()


class FakeExecutor(_Fake, ExecutorWithMultiNode, FakeNodePools):
    """The fake of a cluster engine: it also runs work across several nodes."""


class OneNodeExecutor(_Fake):
    """The fake of an engine that runs work on one node only (no multi-node)."""


class SlowExecutor(FakeExecutor):
    """Work stays `starting` until the test calls `release(workload_id)`."""

    name = "fake-slow"
    start_state = ExecState.STARTING

    def release(self, workload_id: str) -> None:
        self.set_running(workload_id)


class NeverStarts(FakeExecutor):
    """Work stays `starting` forever (an engine that accepts work but never runs it)."""

    name = "fake-never-starts"
    start_state = ExecState.STARTING

    def set_running(self, workload_id: str) -> None:  # never leaves starting
        return None


class FailingExecutor(FakeExecutor):
    """`start` raises `StartError`: always, or only the first `failures` times; only for the
    workloads `only` accepts, when given (the others start); `permanent` marks the error so."""

    name = "fake-failing"

    def __init__(
        self,
        clock: Clock,
        *,
        world: FakeWorld | None = None,
        ignores_term: bool = False,
        failures: int | None = None,
        message: str = "the fake engine refused to start the work",
        permanent: bool = False,
        only: Callable[[Workload], bool] | None = None,
    ) -> None:
        super().__init__(clock, world=world, ignores_term=ignores_term)
        self.failures_left = failures
        self.message = message
        self.permanent = permanent
        self.only = only
        self.attempts = 0

    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        if self.only is not None and not self.only(workload):
            return super().start(workload, allocation, env=env, unix_user=unix_user)
        self.attempts += 1
        if self.failures_left is None or self.failures_left > 0:
            if self.failures_left is not None:
                self.failures_left -= 1
            raise StartError(f"{self.message} (workload {workload.id})", permanent=self.permanent)
        return super().start(workload, allocation, env=env, unix_user=unix_user)


def _message(p: FakeProcess) -> str:
    if p.state is ExecState.LOST:
        return "the work vanished without an exit code"
    if p.exit_code is not None and p.exit_code > 128:
        return f"killed by signal {p.exit_code - 128}"
    if p.exit_code is not None:
        return f"exited with code {p.exit_code}"
    return ""
