"""The local engine (`gpupool up --engine local`): work as processes on this host's GPUs.
See `engine`, and docs/executors.md ("The local executor")."""
