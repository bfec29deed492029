"""Notebooks as Slurm jobs: the job script picks its port, gpupool learns where it listens.

A `notebook` workload with a command (``jupyterhub-singleuser``, submitted by the hub's
`RemoteNotebookSpawner`) runs as any other Slurm job, wrapped by `notebook_script`: on the
compute node the script picks a free TCP port, writes it to the workload's port file (made
by gpupool next to the output file, owned by the job's user, 0600), exports it as
``GPUPOOL_NOTEBOOK_PORT`` and, when the hub's ``JUPYTERHUB_SERVICE_URL`` is set, points it at
``0.0.0.0:<port>`` (jupyterhub-singleuser binds where that URL says), then ``exec``s the
command. The executor reads the port file and the node's address (``NodeAddr``, from
``sinfo``) and reports ``http://<address>:<port>`` as the workload's endpoint.

The endpoint is reported once something accepts connections there (`serving`), not as soon
as the port is written: a notebook server that dies at once (its account has no home, the
command is missing) is then never offered to the hub, which would wait for it to answer until
its own timeout; the job's end is reported as soon as Slurm reports it instead. Only a refused
connection (the node answers, nothing listens) holds the endpoint back; where gpupool cannot
reach the node (a firewall between it and the compute nodes, a timeout) it cannot tell, and
reports the endpoint as before.

The port is chosen by the job itself, so it never collides with other jobs' ports on the
node (a tiny window between choosing and binding remains, as with every spawner that picks
ports). The file is the job user's own: the user could only redirect their own notebook.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from pathlib import Path

#: Python run on the node (the notebook needs Python there anyway): a free port, and the
#: hub's service URL moved to it, as shell assignments
_PICK_PORT = r"""
import os, shlex, socket, urllib.parse as up
s = socket.socket(); s.bind(("", 0)); port = s.getsockname()[1]; s.close()
print("GPUPOOL_NOTEBOOK_PORT=%d" % port)
url = os.environ.get("JUPYTERHUB_SERVICE_URL")
if url:
    moved = up.urlsplit(url)._replace(netloc="0.0.0.0:%d" % port).geturl()
    print("JUPYTERHUB_SERVICE_URL=" + shlex.quote(moved))
"""


def port_file(output_dir: Path, workload_id: str) -> Path:
    """Where the job of a notebook writes its port."""
    return output_dir / f"{workload_id}.port"


def notebook_script(command: Sequence[str], port_path: Path, python: str = "python3") -> str:
    """The batch script of a notebook job (see the module docstring)."""
    return (
        "#!/bin/sh\n"
        f'eval "$({shlex.quote(python)} -c {shlex.quote(_PICK_PORT)})" || exit 97\n'
        "export GPUPOOL_NOTEBOOK_PORT JUPYTERHUB_SERVICE_URL\n"
        f'printf "%s\\n" "$GPUPOOL_NOTEBOOK_PORT" > {shlex.quote(str(port_path))} || exit 97\n'
        f"exec {shlex.join(command)}\n"
    )


def read_port(path: Path) -> int | None:
    """The port a notebook job wrote, or None (not yet, or not a port)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def endpoint(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def listening(address: str, port: int, timeout_s: float = 0.5) -> bool | None:
    """True when something accepts TCP connections at address:port, False when the
    connection is refused (nothing listens), None when gpupool cannot tell (timeout,
    unreachable)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return None


def serving(port_path: Path, address: str) -> str:
    """The notebook's endpoint once its job wrote its port and the port is not refused
    (see the module docstring); "" before."""
    port = read_port(port_path)
    if port is None or listening(address, port) is False:
        return ""
    return endpoint(address, port)
