"""Moved to `gpupool.api.tenancy` (shared by the server and the client); imports of the old
path keep working."""

from gpupool.api.tenancy import *  # noqa: F403
