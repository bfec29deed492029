"""Keeps the JupyterHub that `gpupool up` runs alive, and says so when it is not.

Before the hub starts, `check_ports` refuses ports that another program holds (the hub would
otherwise exit on its own, into its log file, while gpupool serves on as if all were well).
`HubKeeper` then watches the hub process: when it exits it reports the exit code with the
end of the hub's log and starts it again, within a `RestartBudget`; past the budget it stops
trying and says that the hub is down while gpupool itself keeps serving.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from gpupool.jupyterhub.config import HubSettings, HubSetupError
from gpupool.restarts import RestartBudget

log = logging.getLogger(__name__)

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


class HubKeeper:
    """Runs the hub through `start()` (which returns its Popen) and restarts it when it exits.

    `report(message)` is told, loudly, about every exit and every give-up. `check()` does one
    round of watching; `run_in_background()` calls it every `check_every_s` seconds from a
    thread until `stop()`, which ends the hub (SIGTERM to its process group, then SIGKILL)."""

    def __init__(
        self,
        start: Callable[[], subprocess.Popen],
        log_path: Path,
        report: Callable[[str], None],
        budget: RestartBudget | None = None,
        check_every_s: float = 1.0,
    ):
        self._start = start
        self.log_path = log_path
        self.report = report
        self.budget = budget or RestartBudget()
        self.check_every_s = check_every_s
        self.proc: subprocess.Popen | None = None
        self.gave_up = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> subprocess.Popen:
        self.proc = self._start()
        return self.proc

    def check(self) -> None:
        """If the hub has exited: report it and start it again (or give up, and say so)."""
        proc = self.proc
        if proc is None or proc.poll() is None or self._stopping.is_set():
            return
        tail = log_tail(self.log_path)
        said = f"JupyterHub exited with code {proc.returncode}"
        if tail:
            said += f"; the end of {self.log_path}:\n{tail}"
        if self.budget.take():
            self.report(f"{said}\ngpupool: restarting JupyterHub")
            self.start()
        else:
            self.proc = None
            self.gave_up = True
            self.report(
                f"{said}\ngpupool: JupyterHub keeps exiting; not restarting it. gpupool itself "
                "keeps serving; fix the cause above and restart gpupool up"
            )

    def run_in_background(self) -> None:
        def watch() -> None:
            while not self._stopping.wait(self.check_every_s):
                try:
                    self.check()
                except Exception:  # noqa: BLE001 - the watcher must outlive one bad round
                    log.exception("watching JupyterHub failed")

        self._thread = threading.Thread(target=watch, name="hub-keeper", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop watching and stop the hub and its proxy (notebooks are gpupool workloads and
        keep running)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        proc = self.proc
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=timeout_s)
                return
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout_s)
