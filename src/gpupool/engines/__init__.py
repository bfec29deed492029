"""Cluster engines: an executor, an inventory of nodes and GPUs, and a telemetry source
(see `gpupool.engines.base`). `local` runs work on this host; `kubernetes` runs it as pods
of a cluster (`gpupool.engines.kubernetes`); `slurm` runs it as batch jobs of a Slurm
cluster (`gpupool.engines.slurm`); `fake` serves the tests.

`gpupool up --engine NAME` picks one.
"""

from gpupool.engines.base import Engine, EngineEnv, EngineError, NodeTelemetry

#: Engines `gpupool up --engine` offers.
AVAILABLE = ("local", "kubernetes", "slurm")
#: Engines named in `--engine` that do not exist yet -> the issue that adds them.
PLANNED: dict[str, int] = {}

__all__ = ["AVAILABLE", "PLANNED", "Engine", "EngineEnv", "EngineError", "NodeTelemetry"]
