"""The engines `gpupool up --engine NAME` offers: name -> `EngineSpec`.

Each spec names its engine class and its options dataclass by import path, loaded only when
asked for (`engine_class()`, `options_class()`), so reading the registry imports no engine.
`gpupool up` builds each engine's flags from its options (`gpupool.engines.common.options`)
and shows them in the engine's own help panel. Adding an engine is one line here (see
docs/architecture.md, "How to add an engine"). The fake engine of the tests and the template
are not registered.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from gpupool.engines.common.engine import Engine


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class EngineSpec:
    """One engine: `engine` and `options` are ``module:Class`` paths; `description` says in
    a few words where its work runs (`gpupool up --help`)."""

    name: str
    title: str
    engine: str
    options: str
    description: str

    @property
    def panel(self) -> str:
        """The help panel of its flags."""
        return f"{self.title} engine (--engine {self.name})"

    def engine_class(self) -> type[Engine]:
        cls = _load(self.engine)
        assert isinstance(cls, type) and issubclass(cls, Engine), self.engine
        return cls

    def options_class(self) -> type:
        cls = _load(self.options)
        assert isinstance(cls, type), self.options
        return cls

    def create(self, options: object) -> Engine:
        """The engine, over `options` (an instance of `options_class()`)."""
        return self.engine_class()(options)  # type: ignore[call-arg]


ENGINES: dict[str, EngineSpec] = {
    spec.name: spec
    for spec in (
        EngineSpec(
            "local",
            "Local",
            "gpupool.engines.local.engine:LocalEngine",
            "gpupool.engines.local.engine:LocalOptions",
            "processes on this machine's GPUs",
        ),
        EngineSpec(
            "kubernetes",
            "Kubernetes",
            "gpupool.engines.kubernetes.engine:KubernetesEngine",
            "gpupool.engines.kubernetes.engine:KubeOptions",
            "pods of a cluster",
        ),
        EngineSpec(
            "slurm",
            "Slurm",
            "gpupool.engines.slurm.engine:SlurmEngine",
            "gpupool.engines.slurm.engine:SlurmOptions",
            "batch jobs of the Slurm cluster of $SLURM_CONF",
        ),
    )
}
