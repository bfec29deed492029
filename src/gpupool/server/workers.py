"""API worker processes in front of the server: `gpupool up --workers N`.

One Python process serves about 150 requests/s before its GIL is the limit, and requests it
serves wait while its background loops hold the GIL (bench/results/api_load.md). So a busy
server runs N API workers that all accept on the public port (SO_REUSEPORT: the kernel
spreads the connections), in front of the primary:

- the **primary** is `gpupool up` itself: it runs every background loop, the executor and
  telemetry, and serves the whole API on `<run_dir>/api.sock` only (it holds the public
  port without listening on it, so no other program can take it);
- **workers** (`python -m gpupool.server.workers`, started and restarted by the primary's
  `Supervisor`) answer the database-only requests themselves and forward the rest to the
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
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpupool.domain import Allocation, Workload
from gpupool.executors.base import ExecStatus, Executor, ExecutorError, Handle, RunningProcess
from gpupool.restarts import RestartBudget
from gpupool.server.bus import PRIMARY, Bus
from gpupool.server.context import AppContext

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


def on_notice(ctx: AppContext) -> Callable[[str], None]:
    """What a process does with a bus message (see gpupool.server.bus)."""

    def handle(text: str) -> None:
        verb, _, arg = text.partition(" ")
        if verb == "wake" and arg:
            ctx.loops.wake(arg)
        elif text == "auth changed":
            ctx.auth_cache.clear()
        else:
            log.warning("bus: unknown message %r", text)

    return handle


def attach_bus(ctx: AppContext, run: Path, name: str) -> Bus:
    """Join this process to the server's bus as `name` (PRIMARY or worker-N)."""
    ctx.bus = Bus(run, name, on_notice(ctx))
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


class Supervisor:
    """Starts `count` API workers (worker-1 ... worker-count), restarts one that dies (within
    a `RestartBudget`), and stops them all. `command(index)` is a worker's argv;
    `env` its environment (GPUPOOL_DATABASE_URL included)."""

    def __init__(
        self,
        count: int,
        command: Callable[[int], list[str]],
        env: dict[str, str] | None = None,
        on_all_gone: Callable[[], None] | None = None,
        check_every_s: float = 1.0,
    ):
        self.count = count
        self.command = command
        self.env = env
        #: called (from the watch thread) when no worker is left to serve the port
        self.on_all_gone = on_all_gone
        self.check_every_s = check_every_s
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.restarts = RestartBudget()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for index in range(1, self.count + 1):
            self._spawn(index)
        self._thread = threading.Thread(target=self._watch, name="workers", daemon=True)
        self._thread.start()

    def _spawn(self, index: int) -> None:
        # stdin is a pipe the worker reads until EOF: the primary's end closes when the
        # primary exits in any way, and the worker then stops.
        self.procs[index] = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            self.command(index), stdin=subprocess.PIPE, start_new_session=True, env=self.env
        )

    def _watch(self) -> None:
        while not self._stopping.wait(self.check_every_s):
            for index, proc in list(self.procs.items()):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                if not self.restarts.take():
                    log.error(
                        "API worker %d exited (code %s); too many restarts this minute, "
                        "serving with fewer processes",
                        index,
                        proc.returncode,
                    )
                    del self.procs[index]
                    if not self.procs and self.on_all_gone is not None:
                        self.on_all_gone()
                    continue
                log.warning("API worker %d exited (code %s); restarting it", index, proc.returncode)
                self._spawn(index)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask every worker to stop (closing its stdin: it finishes the requests it holds),
        then SIGTERM what is left after half of `timeout_s`, then SIGKILL."""
        self._stopping.set()
        for proc in self.procs.values():
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        for sig, share in ((None, 0.5), (signal.SIGTERM, 0.5), (signal.SIGKILL, 0.0)):
            left = [p for p in self.procs.values() if p.poll() is None]
            if sig is not None:
                for proc in left:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(sig)
            deadline = time.monotonic() + timeout_s * share
            for proc in left:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(timeout=5)


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
        self.supervisor = Supervisor(
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


def make_server(config):  # noqa: ANN001, ANN201 - uvicorn's Config and Server
    """A uvicorn server that leaves signals to its caller (uvicorn's own capture re-raises
    SIGTERM after shutdown, which would skip the caller's cleanup) and that says where it
    listens also when given its sockets."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]  # noqa: ANN202
            yield

        async def startup(self, sockets=None) -> None:  # noqa: ANN001
            await super().startup(sockets)
            if not self.started or sockets is None:
                return  # uvicorn said where it listens itself
            for sock in sockets:
                name = sock.getsockname()
                where = (
                    f"unix socket {name}"
                    if sock.family == socket.AF_UNIX
                    else f"http://{self.config.host}:{name[1]}"
                )
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on %s (Press CTRL+C to quit)", where
                )

    return Server(config)


def settle_heap() -> None:
    """Before serving: move what startup allocated (modules, app, ORM mappings) out of the
    cyclic garbage collector's sight, so its full collections stay short under load."""
    import gc

    gc.collect()
    gc.freeze()


def stop_on_signals(server) -> None:  # noqa: ANN001 - a uvicorn.Server
    """SIGINT/SIGTERM: stop serving (a second one: also drop open connections)."""

    def stop(_signum: int, _frame: object) -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


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
    ctx.extras["process"] = f"worker-{args.index}"
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
