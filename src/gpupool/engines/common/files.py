"""Files written whole or not at all, for state that other processes read while it is
written (the local engine's job files)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Write `text` to `path` so that readers see either nothing or the whole content; the
    file is created with `mode` (private to its owner by default).

    No fsync: the files must survive the server's death (kill -9), which the page cache
    does; a power loss ends the jobs too."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # O_CREAT honours the umask, and the file may be left from before
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
