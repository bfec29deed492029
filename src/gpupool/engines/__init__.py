"""Cluster engines: an executor, an inventory of nodes and GPUs, and a telemetry source
(see `gpupool.engines.base`). `local` runs work on this host; `fake` serves the tests.

`gpupool up --engine NAME` picks one. Kubernetes and Slurm are planned (issues 15 and 16).
"""

from gpupool.engines.base import Engine, EngineEnv, EngineError, NodeTelemetry

#: Engines `gpupool up --engine` offers.
AVAILABLE = ("local",)
#: Engines named in `--engine` that do not exist yet -> the issue that adds them.
PLANNED = {"kubernetes": 15, "slurm": 16}

__all__ = ["AVAILABLE", "PLANNED", "Engine", "EngineEnv", "EngineError", "NodeTelemetry"]
