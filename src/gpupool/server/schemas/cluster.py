"""Moved to `gpupool.api.cluster` (shared by the server and the client); imports of the old
path keep working."""

from gpupool.api.cluster import *  # noqa: F403
