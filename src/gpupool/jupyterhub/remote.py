"""`RemoteNotebookSpawner`: the earlier name of `GpupoolSpawner`, kept for hub configs that
name it (``c.JupyterHub.spawner_class`` and ``c.RemoteNotebookSpawner.*`` settings). Every
engine now runs notebooks itself and reports their endpoint, so one spawner serves all."""

from __future__ import annotations

from gpupool.jupyterhub.spawner import GpupoolSpawner, remote_env, wait_endpoint

__all__ = ["RemoteNotebookSpawner", "remote_env", "wait_endpoint"]


class RemoteNotebookSpawner(GpupoolSpawner):
    """`GpupoolSpawner` under its earlier name (a subclass, so that settings of either name
    apply)."""
