"""Short notices between the processes of one gpupool server (`gpupool up --workers N`).

Each process binds a Unix datagram socket `<run_dir>/<name>.bus` and reads it on a daemon
thread, handing each message (a short text such as ``wake scheduler``) to its handler.
`send(to, msg)` and `broadcast(msg)` never block and never raise for a peer that is gone: a
notice is a hint ("look again soon"), and every receiver also acts on its own timers, so a
lost one only delays. The run directory is the server's own (mode 0700).

Messages in use: ``wake <loop>`` (to the primary: run that loop's pass soon; sent after a
submission served by a worker) and ``auth changed`` (to everyone: forget cached tokens;
sent after a revocation or a change of users or roles).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".bus"
#: The bus name of the process that runs the loops; workers are "worker-N".
PRIMARY = "primary"
MAX_MESSAGE = 512
#: To everyone: forget cached tokens.
AUTH_CHANGED = "auth changed"


def wake(loop: str) -> str:
    """To the primary: run `loop`'s pass soon."""
    return f"wake {loop}"


class Bus:
    """This process's end of the bus. `on_message(text)` runs on the bus thread."""

    def __init__(self, run_dir: Path, name: str, on_message: Callable[[str], None]):
        self.run_dir = run_dir
        self.name = name
        self.path = run_dir / f"{name}{SUFFIX}"
        self.on_message = on_message
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a process that died
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(self.path))
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"bus-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError:
                return  # closed
            if not data:  # close() wakes us with an empty datagram
                continue
            try:
                self.on_message(data.decode("utf-8", "replace"))
            except Exception:  # noqa: BLE001 - a bad handler must not stop the bus
                log.exception("bus %s: handling %r failed", self.name, data)

    def send(self, to: str, message: str) -> bool:
        """Send to the peer named `to`; False when it is not there (or its queue is full)."""
        return self._send_path(self.run_dir / f"{to}{SUFFIX}", message)

    def broadcast(self, message: str) -> int:
        """Send to every other peer in the run directory; returns how many got it."""
        sent = 0
        for path in sorted(self.run_dir.glob(f"*{SUFFIX}")):
            if path != self.path and self._send_path(path, message):
                sent += 1
        return sent

    def _send_path(self, path: Path, message: str) -> bool:
        data = message.encode()[:MAX_MESSAGE]
        try:
            self._out.sendto(data, str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return False  # not started yet, or gone: it re-reads everything when it starts
        except BlockingIOError:
            return False  # its queue is full of notices it has not read: it will look anyway
        except OSError as e:
            log.warning("bus %s: cannot send to %s: %s", self.name, path.name, e)
            return False
        return True

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._out.sendto(b"", str(self.path))  # wake the reader
        self._thread.join(timeout=5)
        self._sock.close()
        self._out.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
