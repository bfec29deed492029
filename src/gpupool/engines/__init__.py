"""Cluster engines: an executor, an inventory of nodes and GPUs, and a telemetry source
(see `gpupool.engines.base`). `local` runs work on this host; `kubernetes` runs it as pods
of a cluster (`gpupool.engines.kubernetes`); `fake` serves the tests.

`gpupool up --engine NAME` picks one. Slurm is planned (issue 16).
"""

from gpupool.engines.base import Engine, EngineEnv, EngineError, NodeTelemetry

#: Engines `gpupool up --engine` offers.
AVAILABLE = ("local", "kubernetes")
#: Engines named in `--engine` that do not exist yet -> the issue that adds them.
PLANNED = {"slurm": 16}

__all__ = ["AVAILABLE", "PLANNED", "Engine", "EngineEnv", "EngineError", "NodeTelemetry"]
