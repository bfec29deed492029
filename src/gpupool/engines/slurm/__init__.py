"""The Slurm engine (`gpupool up --engine slurm`): see `engine`, and docs/slurm.md."""
