"""API worker processes in front of the server: `gpupool up --workers N`.

One Python process serves about 150 requests/s before its GIL is the limit, and requests it
serves wait while its background loops hold the GIL (bench/results/api_load.md). So a busy
server runs N API workers that all accept on the public port (SO_REUSEPORT: the kernel
spreads the connections), in front of the primary:

- the **primary** is `gpupool up` itself: it runs every background loop, the executor and
  telemetry, and serves the whole API on `<run_dir>/api.sock` only (it holds the public
  port without listening on it, so no other program can take it);
- **workers** (`python -m gpupool.server.workers`, started and restarted by the primary's
  `worker_supervisor`) answer the database-only requests themselves and forward the rest to the
  primary (`gpupool.server.forward`).

They share the database (on SQLite, writers take turns through the store's flock) and tell
each other what they cannot see through `gpupool.server.bus`: a worker wakes the primary's
scheduler after a submission; any process that changes users, roles or tokens makes the
others forget their cached tokens. A worker exits when the primary goes away, even by
kill -9 (it reads its stdin, a pipe from the primary, until end of file).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from gpupool.domain import Allocation, Workload
from gpupool.engines.common.executor import (
    ExecStatus,
    Executor,
    ExecutorError,
    Handle,
    RunningProcess,
)
from gpupool.server.bus import PRIMARY, Bus
from gpupool.server.context import AppContext
from gpupool.server.serving import make_server, settle_heap, stop_on_signals
from gpupool.supervise import Supervisor

log = logging.getLogger(__name__)

__all__ = ["PRIMARY", "WorkerPool", "main"]
#: Unix socket paths are limited to 107 bytes; longer run dirs move to the temp dir.
_MAX_SOCKET_PATH = 100


def run_dir(data_dir: Path) -> Path:
    """The server's sockets: `<data_dir>/run` (mode 0700), or a private directory in the
    temp dir when that path is too long for a Unix socket."""
    d = data_dir / "run"
    if len(str(d / "worker-999.bus")) > _MAX_SOCKET_PATH:
        digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
        d = Path(tempfile.gettempdir()) / f"gpupool-{os.geteuid()}-{digest}"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o700)
    return d


def api_socket(run: Path) -> Path:
    """Where the primary answers the requests its workers forward."""
    return run / "api.sock"


def listen_tcp(host: str, port: int, *, shared: bool, listen: bool = True) -> socket.socket:
    """A TCP socket bound to host:port. `shared`: other processes of this user may bind the
    same port (SO_REUSEPORT) and the kernel spreads connections over those that listen.
    `listen=False` (the primary) only holds the port, so no other program takes it while
    the workers serve it; it first checks that nobody holds it already."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    if shared and not listen and port:
        with socket.socket(family, socket.SOCK_STREAM) as check:
            check.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            check.bind(addr)  # raises EADDRINUSE when another program has the port
    sock = socket.socket(family, socket.SOCK_STREAM)
    if listen:  # a held port without SO_REUSEADDR: others cannot bind it even so
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    if listen:
        sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def listen_unix(path: Path) -> socket.socket:
    """A listening Unix stream socket at `path` (a stale one is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    path.chmod(0o600)
    sock.listen(2048)
    return sock


def attach_bus(ctx: AppContext, run: Path, name: str) -> Bus:
    """Join this process to the server's bus as `name` (PRIMARY or worker-N)."""
    ctx.bus = Bus(run, name, ctx.on_notice)
    return ctx.bus


class PrimaryOnlyExecutor(Executor):
    """A worker's executor: work is started, watched and stopped by the primary only (the
    routes that need it are forwarded), so any call here is a routing bug."""

    name = "primary-only"

    def _refuse(self) -> ExecutorError:
        return ExecutorError("an API worker process has no executor; the primary serves this")

    def start(self, workload: Workload, allocation: Allocation | None, **_: object) -> Handle:
        raise self._refuse()

    def poll(self, workload_id: str) -> ExecStatus:
        raise self._refuse()

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        raise self._refuse()

    def list_running(self) -> list[RunningProcess]:
        raise self._refuse()


def worker_supervisor(
    count: int,
    command: Callable[[int], list[str]],
    env: dict[str, str] | None = None,
    on_all_gone: Callable[[], None] | None = None,
    check_every_s: float = 1.0,
) -> Supervisor:
    """A supervisor of API workers 1..count: `command(i)` is worker i's argv, `env` their
    environment (GPUPOOL_DATABASE_URL included). A worker serves until its stdin, a pipe
    from this process, closes: that ends it when this process exits in any way, and it is
    how `stop()` asks it first (it finishes the requests it holds)."""

    def spawn(index: int) -> subprocess.Popen:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            command(index), stdin=subprocess.PIPE, start_new_session=True, env=env
        )

    def exited(index: int, code: int, restarted: bool) -> None:
        if restarted:
            log.warning("API worker %d exited (code %s); restarting it", index, code)
        else:
            log.error(
                "API worker %d exited (code %s); too many restarts this minute, serving with "
                "fewer processes",
                index,
                code,
            )

    return Supervisor(
        count,
        spawn,
        on_exit=exited,
        on_all_gone=on_all_gone,
        ask=_close_stdin,
        check_every_s=check_every_s,
        name="workers",
    )


def _close_stdin(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()


def worker_command(index: int, run: Path, host: str, port: int, log_level: str) -> list[str]:
    """The argv of API worker `index` (the database URL goes in its environment)."""
    return [
        sys.executable,
        "-m",
        "gpupool.server.workers",
        "--index",
        str(index),
        "--run-dir",
        str(run),
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        log_level,
    ]


class WorkerPool:
    """What the primary runs for `--workers N`: it holds the public port (without listening),
    listens on its Unix socket (`sockets`, for uvicorn), joins the bus and starts the
    workers. Raises OSError when the port is taken. `close()` undoes all of it."""

    def __init__(
        self,
        ctx: AppContext,
        data_dir: Path,
        host: str,
        port: int,
        count: int,
        log_level: str = "info",
        on_all_gone: Callable[[], None] | None = None,
    ):
        run = run_dir(data_dir)
        self.held = listen_tcp(host, port, shared=True, listen=False)
        self.sockets = [listen_unix(api_socket(run))]
        self.bus = attach_bus(ctx, run, PRIMARY)
        self.supervisor = worker_supervisor(
            count,
            lambda i: worker_command(i, run, host, port, log_level),
            env=dict(os.environ, GPUPOOL_DATABASE_URL=ctx.store.url),
            on_all_gone=on_all_gone,
        )
        self.supervisor.start()

    def close(self) -> None:
        self.supervisor.stop()
        self.bus.close()
        for sock in (*self.sockets, self.held):
            sock.close()


def _stop_when_orphaned(server) -> None:  # noqa: ANN001 - a uvicorn.Server
    """Read stdin (the primary's pipe) until EOF, then ask the server to stop."""

    def watch() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        server.should_exit = True

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """An API worker: serve the database-only routes, forward the rest to the primary."""
    import uvicorn

    from gpupool.clock import SystemClock
    from gpupool.server.app import create_app
    from gpupool.server.settings import Settings
    from gpupool.store import open_store

    ap = argparse.ArgumentParser(prog="python -m gpupool.server.workers")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s worker-{args.index} %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per forwarded request
    settings = Settings.from_env(start_loops=False)  # GPUPOOL_DATABASE_URL from the primary
    # the primary migrated the database, and makes its checkpoints
    store = open_store(settings.database_url, migrate=False, wal_autocheckpoint=False)
    app = create_app(
        settings,
        executor=PrimaryOnlyExecutor(),
        clock=SystemClock(),
        store=store,
        forward_to=str(api_socket(args.run_dir)),
    )
    ctx: AppContext = app.state.ctx
    ctx.process = f"worker-{args.index}"
    bus = attach_bus(ctx, args.run_dir, f"worker-{args.index}")
    sock = listen_tcp(args.host, args.port, shared=True)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level.lower(),
        lifespan="on",
        timeout_keep_alive=60,
    )
    server = make_server(config)
    stop_on_signals(server)
    _stop_when_orphaned(server)
    settle_heap()
    try:
        server.run(sockets=[sock])
    finally:
        bus.close()
        store.close()


if __name__ == "__main__":
    main()
