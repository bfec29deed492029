"""The template engine's executor: fill in the four methods every executor has.

The contract is `gpupool.engines.common.executor` (read its module docstring): `start`
returns at once (raise `StartError`, `permanent=True` when retrying cannot help); `poll`
answers from the engine's own record of the work (`ExecState.UNKNOWN` for work it never
started), so that a new executor after a restart of `gpupool up` finds the same work;
`stop` never blocks (escalate the forced kill in `tick`, on the injected clock);
`list_running` lists live work, including work an earlier server started. Optional powers
are the capability mixins of the same module (`ExecutorWithLogs`, `ExecutorWithAdoption`,
`ExecutorWithMultiNode`, ...): add to the class's bases the ones the engine has and fill in
their methods; callers check them with `isinstance` and treat an executor without one as an
engine without that power. This one has none yet.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.clock import Clock
from gpupool.domain import Allocation, Workload
from gpupool.engines.common.executor import (
    ExecStatus,
    Executor,
    Handle,
    RunningProcess,
    StartError,
)


class TemplateExecutor(Executor):  # + the ExecutorWith* mixins of the engine's powers
    """Runs nothing yet: `start` refuses, every workload is unknown."""

    name = "template"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        """Submit the work to the engine and return its reference at once."""
        raise StartError("the template engine runs nothing; fill in its executor", permanent=True)

    def poll(self, workload_id: str) -> ExecStatus:
        """Ask the engine where the work stands."""
        return ExecStatus.unknown(workload_id)

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        """Ask the engine to end the work; force it `grace_s` later (in `tick`)."""

    def list_running(self) -> list[RunningProcess]:
        """The engine's live work that gpupool started (marked so it can be told apart)."""
        return []
