"""Keeps the JupyterHub that `gpupool up` runs alive, and says so when it is not.

Before the hub starts, `check_ports` refuses ports that another program holds (the hub would
otherwise exit on its own, into its log file, while gpupool serves on as if all were well).
`keep_hub` then has a `gpupool.supervise.Supervisor` watch the hub process: when it exits it
reports the exit code with the end of the hub's log and starts it again, within a
`RestartBudget`; past the budget it stops trying and says that the hub is down while
gpupool itself keeps serving.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil

from gpupool.server.hub.config import HubSettings, HubSetupError
from gpupool.supervise import RestartBudget, Supervisor

#: Lines of the hub's log quoted when it exits.
LOG_TAIL_LINES = 15


def _proxy_alive(settings: HubSettings) -> bool:
    """Whether the proxy of an earlier hub run is still running (JupyterHub takes it over
    from its pid file, so its ports are not 'taken by another program')."""
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        pid = int((settings.data_dir / "proxy.pid").read_text().strip())
        return "configurable-http-proxy" in " ".join(psutil.Process(pid).cmdline())
    return False


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_ports(settings: HubSettings) -> None:
    """HubSetupError naming each port of the hub that another program already holds."""
    ports = [(settings.hub_port, "127.0.0.1", "the hub's API")]
    if not _proxy_alive(settings):
        ports += [
            (settings.port, settings.ip, "JupyterHub's public port"),
            (settings.proxy_api_port, "127.0.0.1", "the proxy's API"),
        ]
    taken = [f"{port} ({what})" for port, host, what in ports if not _bindable(host, port)]
    if taken:
        raise HubSetupError(
            f"port {', '.join(taken)} is in use by another program; JupyterHub needs its public "
            f"port P, P+1 and P+81: pick a free P with --hub-port, or pass --no-jupyterhub"
        )


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def keep_hub(
    start: Callable[[], subprocess.Popen],
    log_path: Path,
    report: Callable[[str], None],
    budget: RestartBudget | None = None,
) -> Supervisor:
    """A supervisor of one JupyterHub, which `start()` launches in its own session (as
    `config.start_hub` does). Each exit is told to `report`, loudly, with the end of the hub's
    log, and whether the hub is restarted or, past the budget, left down. `stop()` ends the
    hub and its proxy (SIGTERM, then SIGKILL after 30 s); notebooks are gpupool workloads
    and keep running."""

    def exited(_: int, code: int, restarted: bool) -> None:
        said = f"JupyterHub exited with code {code}"
        tail = log_tail(log_path)
        if tail:
            said += f"; the end of {log_path}:\n{tail}"
        if restarted:
            report(f"{said}\ngpupool: restarting JupyterHub")
        else:
            report(
                f"{said}\ngpupool: JupyterHub keeps exiting; not restarting it. gpupool itself "
                "keeps serving; fix the cause above and restart gpupool up"
            )

    return Supervisor(
        1, lambda _: start(), on_exit=exited, budget=budget, grace_s=30.0, name="hub-keeper"
    )
