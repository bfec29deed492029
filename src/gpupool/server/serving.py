"""Running the app under uvicorn, the same way in every server process (`gpupool up`, its
API workers, the API benchmark): signals left to the caller, the startup heap frozen."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket


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
