"""The Slurm engine (`gpupool up --engine slurm`): see `engine`, and docs/slurm.md."""

from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions

__all__ = ["SlurmEngine", "SlurmOptions"]
