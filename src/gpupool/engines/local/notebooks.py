"""Notebooks on this host: the local executor runs the hub's single-user server and reports
where it listens.

A `notebook` workload with a command (``jupyterhub-singleuser``, submitted by the hub's
`GpupoolSpawner` with the hub's environment as its write-only `env`) runs as any other local
job: through the launcher, bound to its granted GPUs (MPS variables included), tracked,
stopped with grace, adopted after a restart, its output in its log. What differs:

- **who it runs as** (`LocalExecutor._account`): per-user mode, the owner's Unix account
  (its `unix_user`, else its name), as its jobs; single-user mode as root, the account gpupool
  made for its owner (never the shared `--jobs-account` nor the MPS service account: a
  notebook is its owner's session, which no other member's work may reach); single-user mode
  without root, the server's own account (the server then takes notebooks of the first admin
  only: `gpupool.server.services.notebooks`). Never root;
- **its port**: at start the executor picks a free TCP port on 127.0.0.1 (`free_port`),
  points the hub's ``JUPYTERHUB_SERVICE_URL`` there (jupyterhub-singleuser binds where that
  URL says) and exports ``GPUPOOL_NOTEBOOK_PORT``; the port is kept in the job's spec, so an
  executor after a restart knows it too. As with JupyterHub's own local spawner, another
  program may take the port between its choice and the server's bind: the notebook then
  fails to start and says so in its log;
- **its endpoint**: ``http://127.0.0.1:<port>``, reported by `poll` once something accepts
  connections there (`serving`), so a server that dies at once is never offered to the hub.

Only the hub's proxy, on this host, reaches the port; the hub's OAuth lets only the
notebook's owner in.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Mapping

from gpupool.domain import Workload, WorkloadKind

HOST = "127.0.0.1"
PORT_ENV = "GPUPOOL_NOTEBOOK_PORT"
SERVICE_URL = "JUPYTERHUB_SERVICE_URL"


def is_notebook(workload: Workload) -> bool:
    return workload.kind is WorkloadKind.NOTEBOOK


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on at `host` now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def service_env(declared: Mapping[str, str] | None, port: int) -> dict[str, str]:
    """The notebook's declared environment with the hub's service URL moved to
    ``127.0.0.1:<port>`` (left out when the hub sent none)."""
    env = dict(declared or {})
    url = env.get(SERVICE_URL)
    if url:
        parts = urllib.parse.urlsplit(url)
        env[SERVICE_URL] = parts._replace(netloc=f"{HOST}:{port}").geturl()
    return env


def endpoint(port: int) -> str:
    return f"http://{HOST}:{port}"


def serving(port: int | None, timeout_s: float = 0.2) -> str | None:
    """The notebook's endpoint once something accepts connections on its port; None before
    (and for work without a port)."""
    if not port:
        return None
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s):
            return endpoint(port)
    except OSError:
        return None
