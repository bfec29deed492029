"""The fake engine of the tests and benchmarks: the scriptable fake executor and simulated
(or given) nodes. Nothing runs for real; everything else in the system does."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain import Node
from gpupool.engines.common.engine import Engine, EngineEnv, NodeTelemetry
from gpupool.engines.common.executor import Executor
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.telemetry import SimulatedSource


class FakeEngine(Engine):
    """`executor` (default: a `FakeExecutor` on the system's clock) over `nodes`, registered
    at start (none: the caller seeds the store itself), and `sources`: simulated GPUs whose
    telemetry loops run in the system (none: no telemetry)."""

    name = "fake"
    executor_class = FakeExecutor

    def __init__(
        self,
        executor: Executor | None = None,
        *,
        nodes: Sequence[Node] = (),
        sources: Sequence[SimulatedSource] = (),
    ) -> None:
        self.executor = executor
        self.nodes = list(nodes)
        self.sources = list(sources)

    @classmethod
    def simulated(cls, spec: str, node: str, executor: Executor | None = None) -> FakeEngine:
        """One node named `node` with the simulated GPUs of `spec` (e.g. ``2xH100-80GB``),
        registered and sampled."""
        source = SimulatedSource(spec, hostname=node)
        gpus = tuple(g.to_domain() for g in source.snapshot().gpus)
        return cls(
            executor,
            nodes=[Node(node, gpus, cpu_milli=16000, memory_mib=65536)],
            sources=[source],
        )

    def open(self, env: EngineEnv) -> Executor:
        if self.executor is None:
            self.executor = FakeExecutor(env.clock)
        return self.executor

    def inventory(self) -> list[Node]:
        """The given nodes, and the nodes of node pools that are up in the fake cloud."""
        pooled: list[Node] = []
        if isinstance(self.executor, FakeExecutor):
            pooled = self.executor.cloud.up_nodes()
        return list(self.nodes) + pooled

    def telemetry(self) -> list[NodeTelemetry]:
        return [NodeTelemetry(s.hostname, s) for s in self.sources]
