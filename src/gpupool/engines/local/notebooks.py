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
- **its endpoint**: ``http://127.0.0.1:<port>``, reported by `poll` once a socket of the
  notebook's own account listens there (`serving`, from the kernel's table of TCP sockets):
  a server that dies at once is never offered to the hub, and neither is a program of
  another account that took the port in between (it would receive the owner's requests).

Only the hub's proxy, on this host, reaches the port; the hub's OAuth lets only the
notebook's owner in.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from gpupool.domain import Workload, WorkloadKind

HOST = "127.0.0.1"
PORT_ENV = "GPUPOOL_NOTEBOOK_PORT"
SERVICE_URL = "JUPYTERHUB_SERVICE_URL"
#: the kernel's TCP sockets (IPv4): local address, state and owner of each
TCP_TABLE = Path("/proc/net/tcp")
_LISTEN = "0A"
#: where a listener serves 127.0.0.1: there, or every address (as /proc/net/tcp spells them)
_LOCAL = ("0100007F", "00000000")


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


def listeners(port: int, table: Path = TCP_TABLE) -> set[int]:
    """The uids whose TCP sockets listen on 127.0.0.1:`port` (or on every address)."""
    want = f"{port:04X}"
    uids: set[int] = set()
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:
        return uids
    for line in lines:
        f = line.split()
        if len(f) > 7 and f[3] == _LISTEN:
            addr, _, hex_port = f[1].partition(":")
            if hex_port == want and addr in _LOCAL:
                uids.add(int(f[7]))
    return uids


def serving(notebook: Mapping[str, int] | None, table: Path = TCP_TABLE) -> str | None:
    """The endpoint of a notebook started with `notebook` (its ``port`` and its account's
    ``uid``) once a socket of that account listens there; None before (and for work that is
    no notebook)."""
    if not notebook:
        return None
    port = int(notebook["port"])
    return endpoint(port) if int(notebook["uid"]) in listeners(port, table) else None
