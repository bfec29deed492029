"""Moved to `gpupool.api.workloads` (shared by the server and the client); imports of the old
path keep working."""

from gpupool.api.workloads import *  # noqa: F403
