"""One executor over the executors of several engines (a mixed pool: `gpupool up --engine
local --engine slurm`).

`PoolExecutor` is an `Executor` that routes each call to the engine that owns the work:

- ``start`` goes to the engine whose node the allocation is on (`nodes`: node -> engine, as
  the engines registered them; a node carries the label ``gpupool.io/engine=<name>``). Work
  without GPUs (no allocation passed) is placed by `locate` (its allocation's node), else on
  the default engine. An allocation over nodes of two engines is refused: gangs stay within
  one engine.
- ``poll``, ``stop``, logs and the other per-workload calls go to the engine that runs the
  workload: remembered from ``start``; after a restart of the server, found in each engine's
  ``list_running`` (read once, on the first workload not remembered) and, failing that, by
  `locate(workload_id)` (the engine of the node of the workload's last allocation). Work
  found nowhere reads as UNKNOWN (as for one executor); a stop of such work is sent to every
  engine (each ignores work it does not know), so nothing is left running.
- submit checks are per engine (`refusals`): work is refused when every engine it may run
  on refuses it; work that only some engines take is pinned to the first that does
  (`on_takers`, at submit), so the scheduler never places it on a node of an engine that
  refuses it; ``start`` refuses such a placement too (`StartError`), for work queued before.
- ``list_running``, ``process_map``, the attribution maps and ``prune`` merge every engine's
  answer; ``tick`` and ``close`` go to all of them.

A capability is the pool's when any of its executors has it; a call for a workload whose
engine lacks it gets that engine's own (honest) default answer. With one engine the system
uses that engine's executor directly, not a pool of one (`pool_executor`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.domain.nodepools import NodePool
from gpupool.engines.common import logread
from gpupool.engines.common.executor import (
    CAPABILITIES,
    ExecStatus,
    Executor,
    ExecutorError,
    ExecutorWithAttribution,
    ExecutorWithMultiNode,
    ExecutorWithNodePools,
    ExecutorWithNotebooks,
    ExecutorWithPruning,
    ExecutorWithRunTimes,
    ExecutorWithSharedGPUs,
    ExecutorWithSubmitChecks,
    Handle,
    NodeRequestStatus,
    PoolNodeStatus,
    PoolStates,
    RunningProcess,
    StartError,
    TemplateProblem,
    logs_of,
)

log = logging.getLogger(__name__)

#: (engine name) of the node of a workload's last allocation, None when it has none
Locate = Callable[[str], str | None]


def _nowhere(workload_id: str) -> str | None:
    return None


class PoolExecutor(Executor):
    """The executors of several engines as one (see the module docstring). `executors` maps
    engine name -> its executor, the first being the default engine's; `nodes` (node ->
    engine name) and `gpus` (GPU uuid -> engine name) are filled as engines register their
    nodes (`assign`)."""

    name = "pool"

    def __init__(self, executors: Mapping[str, Executor], *, locate: Locate = _nowhere) -> None:
        if not executors:
            raise ValueError("a pool needs at least one engine's executor")
        self.executors = dict(executors)
        self.default = next(iter(self.executors))
        #: the engines' names ("local+slurm"), as messages about "the ... engine" name it
        self.name = "+".join(self.executors)
        self.nodes: dict[str, str] = {}
        self.gpus: dict[str, str] = {}
        self._locate = locate
        #: workload id -> the engine running it (from start, list_running or locate)
        self._where: dict[str, str] = {}
        self._listed = False

    def assign(self, engine: str, nodes: Mapping[str, tuple[str, ...]]) -> None:
        """`engine` registered `nodes` (node name -> its GPU uuids): route their work there."""
        for node, uuids in nodes.items():
            self.nodes[node] = engine
            for uuid in uuids:
                self.gpus[uuid] = engine

    # -- where a workload runs ---------------------------------------------------------------
    def engine_of(self, workload_id: str) -> str | None:
        """The engine running `workload_id`, or None where no engine knows it."""
        where = self._where.get(workload_id)
        if where is not None:
            return where
        if not self._listed:
            self._list_all()
            where = self._where.get(workload_id)
            if where is not None:
                return where
        where = self._locate(workload_id)
        if where in self.executors:
            self._where[workload_id] = where
            return where
        return None

    def _of(self, workload_id: str) -> Executor | None:
        where = self.engine_of(workload_id)
        return self.executors[where] if where is not None else None

    def _list_all(self) -> list[RunningProcess]:
        out: list[RunningProcess] = []
        complete = True
        for name, ex in self.executors.items():
            try:
                running = ex.list_running()
            except ExecutorError as e:
                log.warning("listing the %s engine's work failed: %s", name, e)
                complete = False
                continue
            for rp in running:
                self._where[rp.workload_id] = name
            out.extend(running)
        self._listed = self._listed or complete
        return out

    def _engine_for_start(self, workload: Workload, allocation: Allocation | None) -> str:
        if allocation is None:
            return self._locate(workload.id) or self.default
        engines = {self.nodes.get(n) for n in allocation.nodes}
        if None in engines:
            unknown = [n for n in allocation.nodes if n not in self.nodes]
            raise StartError(
                f"node {', '.join(unknown)} belongs to no engine of this pool (registered "
                "by an agent or an earlier start, not by an engine running now)"
            )
        if len(engines) > 1:
            raise StartError(
                f"the allocation spans the engines {', '.join(sorted(map(str, engines)))}; "
                "a gang runs within one engine",
                permanent=True,
            )
        return str(engines.pop())

    # -- the contract --------------------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        """Start on the engine of the allocation's node; the handle names that engine's
        executor. An engine that refuses `workload` (`refusals`) does not get it: StartError,
        permanent when every engine it may run on refuses it."""
        where = self._engine_for_start(workload, allocation)
        ex = self.executors[where]
        why = ex.refusal(workload) if isinstance(ex, ExecutorWithSubmitChecks) else None
        if why is not None:  # queued before `on_takers` pinned such work: never run it here
            raise StartError(
                f"the {where} engine refuses this workload ({why}); it goes back to the queue "
                "for an engine that takes it (pin one: engine=NAME)",
                permanent=self.refusal(workload) is not None,
            )
        before = self._where.get(workload.id)
        self._where[workload.id] = where
        try:
            return self.executors[where].start(workload, allocation, env=env, unix_user=unix_user)
        except BaseException:
            if before is None:
                self._where.pop(workload.id, None)
            else:
                self._where[workload.id] = before
            raise

    def poll(self, workload_id: str) -> ExecStatus:
        ex = self._of(workload_id)
        return ex.poll(workload_id) if ex is not None else ExecStatus.unknown(workload_id)

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        ex = self._of(workload_id)
        targets = [ex] if ex is not None else list(self.executors.values())
        for target in targets:
            target.stop(workload_id, reason, grace_s)

    def list_running(self) -> list[RunningProcess]:
        """Every engine's live work (an engine whose listing fails is left out, logged)."""
        return self._list_all()

    def tick(self) -> None:
        for ex in self.executors.values():
            ex.tick()

    def close(self) -> None:
        for ex in self.executors.values():
            ex.close()

    # -- capabilities (declared by `pool_executor`: those any engine's executor has) --------
    # Each routes to the engine concerned; an engine without the power answers as the
    # contract says one without it does.
    def _with(self, kind: type) -> list[Any]:
        return [ex for ex in self.executors.values() if isinstance(ex, kind)]

    def _for_logs(self, workload_id: str) -> Executor:
        return self._of(workload_id) or self.executors[self.default]

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        return logs_of(self._for_logs(workload_id)).log_chunks(workload_id, offset)

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        return logs_of(self._for_logs(workload_id)).log_tail(workload_id, lines, max_bytes)

    def enforcement_of(self, workload_id: str) -> Mapping[str, Enforcement] | None:
        ex = self._of(workload_id)
        if ex is None:
            return {}  # not launched by any engine (yet)
        return ex.enforcement_of(workload_id) if isinstance(ex, ExecutorWithSharedGPUs) else None

    def mps_enforcement(self, gpu_uuid: str, unix_user: str | None = None) -> Enforcement:
        where = self.gpus.get(gpu_uuid)
        if where is None:
            return Enforcement.POLICED
        ex = self.executors[where]
        if isinstance(ex, ExecutorWithSharedGPUs):
            return ex.mps_enforcement(gpu_uuid, unix_user)
        return Enforcement.POLICED

    def mps_env(self, share: Share) -> Mapping[str, str]:
        where = self.nodes.get(share.node)
        if where is None:
            return {}
        ex = self.executors[where]
        return ex.mps_env(share) if isinstance(ex, ExecutorWithSharedGPUs) else {}

    @property
    def one_account(self) -> bool:
        """True when any engine runs every user's work as one account (the hub then serves
        one user only: a pool is no safer than its least isolated engine)."""
        return any(ex.one_account for ex in self._with(ExecutorWithNotebooks))

    def eligible(self, workload: Workload) -> list[str]:
        """The engines `workload` may run on: the one it is pinned to, else all of them."""
        pinned = workload.request.engine
        return [pinned] if pinned in self.executors else list(self.executors)

    def refusals(
        self, workload: Workload, template: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """engine -> why it refuses `workload`, for each engine it may run on that refuses it
        (its `refusal`; with `template`, also its `template_problem`; an engine without
        submit checks refuses nothing and takes no template). Engines not named take it."""
        out: dict[str, str] = {}
        for name in self.eligible(workload):
            ex = self.executors[name]
            why, problem = None, None
            if isinstance(ex, ExecutorWithSubmitChecks):
                why = ex.refusal(workload)
                if template is not None:
                    problem = ex.template_problem(template, workload.owner)
            elif template is not None:
                problem = TemplateProblem("it takes no notebook template; leave it out")
            why = why if why is not None or problem is None else problem.message
            if why is not None:
                out[name] = why
        return out

    def on_takers(self, workload: Workload, template: Mapping[str, Any] | None = None) -> Workload:
        """`workload` as the pool runs it: pinned to the first engine (pool order) that takes
        it when some engine it may run on refuses it (`refusals`), so the scheduler never
        places it on a node of an engine that refuses it; else unchanged (also when every
        engine refuses it: `refusal` and `template_problem` say why)."""
        refused = self.refusals(workload, template)
        takers = [n for n in self.eligible(workload) if n not in refused]
        if not refused or not takers or workload.request.engine == takers[0]:
            return workload
        request = dataclasses.replace(workload.request, engine=takers[0])
        return dataclasses.replace(workload, request=request)

    def refusal(self, workload: Workload) -> str | None:
        """Refused when every engine it may run on refuses it (the pinned one, else all of
        them; `on_takers` pins it to one that takes it); the reasons name their engine."""
        refused = self.refusals(workload)
        if len(refused) < len(self.eligible(workload)):
            return None
        if len(refused) == 1:
            return next(iter(refused.values()))
        return "; ".join(f"the {name} engine: {why}" for name, why in refused.items())

    def template_problem(self, template: Mapping[str, Any], owner: str) -> TemplateProblem | None:
        """None when an engine takes `template` as given, else the first engine's problem
        (`on_takers` then pins the notebook to an engine that takes it)."""
        problems = []
        for ex in self._with(ExecutorWithSubmitChecks):
            problem = ex.template_problem(template, owner)
            if problem is None:
                return None
            problems.append(problem)
        return (
            problems[0]
            if problems
            else TemplateProblem("no engine of this pool takes a notebook template; leave it out")
        )

    def owners(self, container_kind: str, ids: Collection[str]) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        for ex in self._with(ExecutorWithAttribution):
            out.update(ex.owners(container_kind, ids))
        return out

    def container_names(self, container_kind: str, ids: Collection[str]) -> Mapping[str, str]:
        out: dict[str, str] = {}
        for ex in self._with(ExecutorWithAttribution):
            out.update(ex.container_names(container_kind, ids))
        return out

    def process_map(self) -> Mapping[int, str]:
        out: dict[int, str] = {}
        for ex in self._with(ExecutorWithAttribution):
            out.update(ex.process_map())
        return out

    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        ex = self._of(workload_id)
        return ex.run_times(workload_id) if isinstance(ex, ExecutorWithRunTimes) else None

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        removed: list[str] = []
        for ex in self._with(ExecutorWithPruning):
            removed += ex.prune(older_than_s, now)
        for wid in removed:
            self._where.pop(wid, None)
        return removed

    # node pools (issue 34): a pool's nodes are added by its engine (`NodePool.engine`, None:
    # the default engine's); request ids are each engine's own, so a withdrawal goes to every
    # engine (an unknown request is a no-op by the contract), as does the release of a node
    # no engine registered
    def _grower(self, pool: NodePool) -> ExecutorWithNodePools:
        where = pool.engine or self.default
        grower = self.executors.get(where)
        if grower is not None and isinstance(grower, ExecutorWithNodePools):
            return grower
        raise ExecutorError(f"the {where} engine of node pool {pool.name} adds no nodes")

    def request_nodes(
        self, pool: NodePool, count: int, for_workloads: Sequence[Workload], *, atomic: bool
    ) -> str:
        return self._grower(pool).request_nodes(pool, count, for_workloads, atomic=atomic)

    def withdraw(self, request: str) -> None:
        for ex in self._with(ExecutorWithNodePools):
            ex.withdraw(request)

    def release_node(self, node: str) -> None:
        where = self.nodes.get(node)
        targets = self.executors.values() if where is None else [self.executors[where]]
        for ex in targets:
            if isinstance(ex, ExecutorWithNodePools):
                ex.release_node(node)

    def pool_states(self, pools: Sequence[NodePool]) -> PoolStates:
        nodes: list[PoolNodeStatus] = []
        requests: list[NodeRequestStatus] = []
        for name, ex in self.executors.items():
            mine = [p for p in pools if (p.engine or self.default) == name]
            if mine and isinstance(ex, ExecutorWithNodePools):
                states = ex.pool_states(mine)
                nodes += states.nodes
                requests += states.requests
        return PoolStates(tuple(nodes), tuple(requests))


@functools.cache
def _pool_class(capabilities: tuple[type, ...]) -> type[PoolExecutor]:
    """`PoolExecutor` declaring `capabilities` (one class per combination)."""
    if not capabilities:
        return PoolExecutor
    named = "".join(c.__name__.removeprefix("ExecutorWith") for c in capabilities)
    return type(f"PoolExecutorWith{named}", (PoolExecutor, *capabilities), {})


def pool_executor(executors: Mapping[str, Executor], *, locate: Locate = _nowhere) -> Executor:
    """The executor of a system over `executors` (engine name -> executor, the default
    engine's first): the one executor itself when there is one (no wrapper: single-engine
    work runs as before), else a `PoolExecutor` with every capability any of them has."""
    if len(executors) == 1:
        return next(iter(executors.values()))
    has = tuple(c for c in CAPABILITIES if any(isinstance(e, c) for e in executors.values()))
    return _pool_class(has)(executors, locate=locate)


def runs_multi_node(executor: Executor) -> bool:
    """Whether `executor` runs multi-node work (the node label `gpupool.io/multi-node`)."""
    return isinstance(executor, ExecutorWithMultiNode)
