"""Moved to `gpupool.api.base` (shared by the server and the client); imports of the old
path keep working."""

from gpupool.api.base import *  # noqa: F403
