"""A workload that runs again keeps the output of its earlier runs (issue 30 item 4).

Executors that keep a workload's output in one file (local, Slurm) append each new run to it;
before the new run's first byte they write one separator line, so a reader sees every run in
order and where each began::

    --- requeued after preemption at 03:52 UTC; run 2 starts at 04:05 UTC ---

Times are UTC, to the minute (the API and `gpupool show` give the exact ones).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from gpupool.domain import Workload

#: every separator line starts with this
MARK = "--- "


def hhmm(t: float) -> str:
    """Unix seconds as '03:52 UTC'."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M UTC")


def separator(workload: Workload, starts_at: float, stopped_at: float | None = None) -> bytes:
    """The line written before run `workload.preemptions + 1` of a preempted workload, or
    before any other new start of work that already has output. `stopped_at`: when the
    previous run was stopped, where the executor knows it."""
    if workload.preemptions:
        when = f" at {hhmm(stopped_at)}" if stopped_at is not None else ""
        head = f"requeued after preemption{when}; run {workload.preemptions + 1}"
    else:
        head = "started again; this run"
    return f"{MARK}{head} starts at {hhmm(starts_at)} ---\n".encode()


def mark_new_run(fd: int, line: bytes) -> None:
    """Append `line` to the open log `fd` if it already holds output (an earlier run's), on
    a line of its own; an empty log is left alone (the first run needs no separator)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return
    ends_line = os.pread(fd, 1, size - 1) == b"\n"
    os.write(fd, line if ends_line else b"\n" + line)


def mark_new_run_at(path: Path, line: bytes) -> None:
    """`mark_new_run` on the log at `path` (missing: nothing to mark)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        return
    try:
        mark_new_run(fd, line)
    finally:
        os.close(fd)
