"""The engines of one system (`gpupool up --engine local --engine slurm`), opened together.

`EngineSet` holds one or more engines, each named once; the first is the default (work that
no node places goes there). `open(env)` opens every engine and returns the system's
executor: the one engine's own executor, or a `PoolExecutor` over all of them. Each engine
keeps its own inventory, telemetry, MPS daemons and tenant mirror; the set only joins them:

- `nodes_of(engine)` reads the engine's nodes and labels each with the engine's name and
  the capabilities the scheduler must respect (`gpupool.domain.placement`: the engine
  label, ``multi-node`` when its executor runs one workload over several nodes, ``mps``
  when the engine enforces fractional shares with CUDA MPS). A node name another engine
  already registered is refused (`EngineError`): one name, one engine.
- `telemetry()`, `mps()` and `reach_problems()` are every engine's; `describe()` says
  which engine each line is about when there are several.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence

from gpupool.domain import Enforcement, Membership, Node, TenantTree
from gpupool.domain.placement import ENGINE_LABEL, MPS_LABEL, MULTI_NODE_LABEL
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError, MPSDaemons, NodeTelemetry
from gpupool.engines.common.executor import Executor
from gpupool.engines.common.pool import Locate, PoolExecutor, pool_executor, runs_multi_node

log = logging.getLogger(__name__)
#: the strongest first
_STRENGTH = list(Enforcement)


class EngineSet:
    """One or more engines run by one system (see the module docstring)."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        if not engines:
            raise EngineError("no engine chosen; pass --engine NAME")
        names = [e.name for e in engines]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise EngineError(f"--engine {', '.join(twice)} given twice; name each engine once")
        self.engines = list(engines)
        self.executors: dict[str, Executor] = {}
        self.executor: Executor | None = None
        #: node name -> the engine that registered it
        self.owner: dict[str, str] = {}

    @property
    def default(self) -> Engine:
        """The first engine: the hub's notebooks and work no node places run there."""
        return self.engines[0]

    @property
    def several(self) -> bool:
        return len(self.engines) > 1

    def open(self, env: EngineEnv, locate: Locate | None = None) -> Executor:
        """Open every engine in order (closing those opened when one fails: `EngineError`,
        naming the engine when there are several); the system's executor."""
        for engine in self.engines:
            try:
                self.executors[engine.name] = engine.open(env)
            except EngineError as e:
                self.close()
                raise EngineError(
                    f"the {engine.name} engine: {e}" if self.several else str(e)
                ) from None
        kw = {"locate": locate} if locate is not None else {}
        self.executor = pool_executor(self.executors, **kw)
        return self.executor

    def labels_of(self, engine: Engine) -> tuple[tuple[str, str], ...]:
        """The labels every node of `engine` gets (open it first)."""
        labels = [(ENGINE_LABEL, engine.name)]
        if runs_multi_node(self.executors[engine.name]):
            labels.append((MULTI_NODE_LABEL, "true"))
        if engine.shared_enforcement is Enforcement.MPS:
            labels.append((MPS_LABEL, "true"))
        return tuple(labels)

    def nodes_of(self, engine: Engine) -> list[Node]:
        """`engine.inventory()` labelled (see the module docstring); raises `EngineError`
        (the engine's own, or a node name another engine registered)."""
        nodes = engine.inventory()
        for node in nodes:
            other = self.owner.get(node.name, engine.name)
            if other != engine.name:
                raise EngineError(
                    f"node {node.name!r} is offered by both the {other} and the {engine.name} "
                    "engine; a node belongs to one engine: rename one (the local engine's "
                    "--node-name) or leave the node out of the other engine"
                )
        ours = self.labels_of(engine)
        keys = {k for k, _ in ours}
        out = []
        for node in nodes:
            self.owner[node.name] = engine.name
            kept = tuple((k, v) for k, v in node.labels if k not in keys)
            out.append(dataclasses.replace(node, labels=kept + ours))
        if isinstance(self.executor, PoolExecutor):
            self.executor.assign(engine.name, {n.name: tuple(g.uuid for g in n.gpus) for n in out})
        return out

    def inventory(self) -> list[Node]:
        """Every engine's nodes, labelled, in engine order (at start)."""
        return [n for engine in self.engines for n in self.nodes_of(engine)]

    def engine_of_node(self, node: str) -> Engine | None:
        name = self.owner.get(node)
        return next((e for e in self.engines if e.name == name), None)

    def telemetry(self) -> list[NodeTelemetry]:
        return [t for engine in self.engines for t in engine.telemetry()]

    def mps(self) -> list[tuple[MPSDaemons, str]]:
        """The MPS daemons of every engine that keeps some, with the node they serve."""
        return [m for m in (engine.mps() for engine in self.engines) if m is not None]

    @property
    def shared_enforcement(self) -> Enforcement:
        """The strongest engine's (`mps` where one enforces fractions with CUDA MPS): the
        scheduler records it only on nodes labelled for it (`gpupool.io/mps`) and `policed`
        on the others; the reconciler then records what each engine really applied."""
        return min((e.shared_enforcement for e in self.engines), key=_STRENGTH.index)

    def apply_mig_layout(self, node: str, gpu_uuid: str, layout: str) -> str | None:
        engine = self.engine_of_node(node)
        if engine is None:
            return f"node {node} belongs to no engine of this server"
        return engine.apply_mig_layout(node, gpu_uuid, layout)

    def sync_tenants(self, tenants: TenantTree, memberships: Sequence[Membership]) -> None:
        for engine in self.engines:
            engine.sync_tenants(tenants, memberships)

    def describe(self) -> list[tuple[str, bool]]:
        """Each engine's lines; with several, each engine's introduced by its name."""
        if not self.several:
            return self.default.describe()
        lines: list[tuple[str, bool]] = [
            (f"gpupool: {len(self.engines)} engines in one pool: "
             f"{', '.join(e.name for e in self.engines)} (default {self.default.name})", False)
        ]  # fmt: skip
        for engine in self.engines:
            nodes = sorted(n for n, e in self.owner.items() if e == engine.name)
            labels = ", ".join(f"{k}={v}" for k, v in self.labels_of(engine))
            lines.append(
                (f"gpupool: engine {engine.name}: node(s) {', '.join(nodes) or 'none'} ({labels})",
                 False)
            )  # fmt: skip
            lines += [(f"  [{engine.name}] {line}", loud) for line, loud in engine.describe()]
        return lines

    def reach_problems(self, notebook_command: Sequence[str] | None) -> list[str]:
        return [p for engine in self.engines for p in engine.reach_problems(notebook_command)]

    def follow(self, wake: Callable[[str], None], loop_name: Callable[[Engine, str], str]) -> None:
        """Each engine follows its feeds; its wake of a loop (e.g. "inventory") wakes the
        loop of that name for it (`loop_name(engine, name)`)."""
        for engine in self.engines:
            engine.follow(functools.partial(_wake_for, wake, loop_name, engine))

    def close(self) -> None:
        """Close every opened engine (each one's error is logged, the others still close)."""
        for engine in self.engines:
            if engine.name not in self.executors:
                continue
            try:
                engine.close()
            except Exception:  # noqa: BLE001 - one engine's failure must not keep others open
                log.exception("closing the %s engine failed", engine.name)


def _wake_for(
    wake: Callable[[str], None], loop_name: Callable[[Engine, str], str], engine: Engine, name: str
) -> None:
    wake(loop_name(engine, name))
