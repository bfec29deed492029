"""Moved to `gpupool.api.agents` (shared by the server and the client); imports of the old
path keep working."""

from gpupool.api.agents import *  # noqa: F403
