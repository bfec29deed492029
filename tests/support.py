"""Helpers shared by the tests that run real servers and processes.

Waiting here is readiness polling of real processes and threads, bounded by a timeout; it is
never a stand-in for a clock (code under test takes an injected clock for that)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (for servers that take a port number)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_hub_port(*avoid: int) -> int:
    """A port P for `gpupool up --hub-port P` whose P, P+1 (proxy API) and P+81 (hub API)
    were all free a moment ago and are none of `avoid`."""
    for _ in range(100):
        port = free_port()
        wanted = (port, port + 1, port + 81)
        if set(wanted) & set(avoid) or max(wanted) > 65535:
            continue
        try:
            for p in wanted[1:]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise AssertionError("no free port P with P+1 and P+81 free")


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.1):
    """Call `check` until it returns something truthy and return that; fail after `timeout` s
    with a message naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what} (last: {last!r})"
            )
        time.sleep(every)


class ServedApp:
    """An ASGI app served by uvicorn in a thread on 127.0.0.1 (`port`, or a free one).

    Use as a context manager (`with ServedApp(app) as url:`) or with `start()` / `stop()`."""

    def __init__(
        self,
        app: object,
        port: int = 0,
        lifespan: str = "on",
        sock: socket.socket | None = None,
    ):
        import uvicorn

        if sock is None:  # else a listening socket of the caller's (a Unix one, say)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restarts on one port
            sock.bind(("127.0.0.1", port))
            port = sock.getsockname()[1]
        self.sock = sock
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> str:
        self.thread.start()
        wait_for(
            lambda: self.server.started or not self.thread.is_alive(), "the server", timeout=30
        )
        assert self.thread.is_alive(), "the test server did not start"
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def open_to_others(path: Path) -> Path:
    """Make `path` and the directories above it, up to the temp root, searchable by other
    accounts (pytest makes them 0700): as root, MPS refuses pipe directories jobs of other
    accounts could not reach."""
    top = Path(tempfile.gettempdir()).resolve()
    p = path.resolve()
    while p != top and top in p.parents:
        os.chmod(p, os.stat(p).st_mode | 0o011)
        p = p.parent
    return path


def end_process(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 60) -> int:
    """End a process a test started, whatever the test's outcome: `sig` (its polite stop),
    then, if it has not exited within `timeout` s, SIGKILL to it and every process below it.
    Returns its exit status (negative: killed by that signal)."""
    if proc.poll() is None:
        try:
            below = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            below = []
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            for p in below:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
            proc.wait(30)
    return proc.returncode


class GpupoolUp:
    """A real `gpupool up ARGS --port PORT` (the admin's password `password`; the test's
    GPUPOOL_DATABASE_URL left out, `env` added), its output read by a thread; `ready` is set
    once uvicorn serves (or the process ended)."""

    def __init__(
        self, args: list[str], port: int, password: str, env: dict[str, str] | None = None
    ) -> None:
        full = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=password, PYTHONUNBUFFERED="1")
        full.pop("GPUPOOL_DATABASE_URL", None)
        full.update(env or {})
        command = [sys.executable, "-c", "from gpupool.cli.main import run; run()", "up"]
        self.proc = subprocess.Popen(
            [*command, *args, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full,
        )
        self.password = password
        self.url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Uvicorn running on" in line:
                self.ready.set()
        self.ready.set()  # the process ended: stop waiting

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_ready(self, timeout: float = 90) -> None:
        """Wait until it serves (fails with its output if it ended instead)."""
        assert self.ready.wait(timeout), f"gpupool up did not start:\n{self.output}"
        assert self.proc.poll() is None, f"gpupool up exited:\n{self.output}"

    def login(self) -> dict[str, str]:
        """The admin's headers (a fresh session token)."""
        r = httpx.post(
            f"{self.url}/api/v1/auth/login",
            json={"username": "admin", "password": self.password},
        )
        assert r.status_code == 200, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60) -> int:
        """`sig`, then (not gone within `timeout` s) SIGKILL to it and its children."""
        rc = end_process(self.proc, sig, timeout)
        self._reader.join(10)
        return rc
