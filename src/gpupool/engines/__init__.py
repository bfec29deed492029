"""Cluster engines: an executor, an inventory of nodes and GPUs, and a telemetry source
(see `gpupool.engines.base`). `local` runs work on this host; `slurm` runs it as batch jobs
of a Slurm cluster (`gpupool.engines.slurm`); `fake` serves the tests.

`gpupool up --engine NAME` picks one. Kubernetes is planned (issue 15).
"""

from gpupool.engines.base import Engine, EngineEnv, EngineError, NodeTelemetry

#: Engines `gpupool up --engine` offers.
AVAILABLE = ("local", "slurm")
#: Engines named in `--engine` that do not exist yet -> the issue that adds them.
PLANNED = {"kubernetes": 15}

__all__ = ["AVAILABLE", "PLANNED", "Engine", "EngineEnv", "EngineError", "NodeTelemetry"]
