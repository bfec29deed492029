"""A workload's output, read with bounded memory (review F6): the whole of it streamed, a
page from a byte offset, or the last lines read from the end (gpupool.executors.logread).

Every form answers `{workload_id, state, text}` (pages add `offset` and `next_offset`); the
whole read is that same JSON object written as the log is read, so a 400 MB log costs the
server one chunk of memory, not 400 MB.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator
from contextlib import contextmanager

from gpupool.domain import Workload, WorkloadState
from gpupool.executors import logread
from gpupool.executors.base import ExecutorError, NotSupported
from gpupool.server.auth import Principal
from gpupool.server.context import AppContext
from gpupool.server.problems import PermissionDenied
from gpupool.server.schemas.workloads import LogsOut
from gpupool.server.services.workloads import visible_or_404
from gpupool.store import Conflict, NotFound, WorkloadRepo

log = logging.getLogger(__name__)
#: a page (`?offset=`) carries at most this many bytes of the log
PAGE_MAX_BYTES = 1 << 20


def _readable(ctx: AppContext, p: Principal, workload_id: str) -> Workload:
    """The workload, if `p` may read its logs: its owner, a tenant-admin above it, an admin.
    Work `p` may not see at all is a 404, as if it did not exist."""
    with ctx.store.read() as s:
        w = visible_or_404(p, WorkloadRepo(s).get(workload_id))
    if w.owner != p.name and not p.can_manage(w.tenant):
        raise PermissionDenied(
            f"only {w.owner} (the owner), a tenant-admin of {w.tenant} or an admin "
            "may read its logs"
        )
    return w


def _out(w: Workload, text: str, **page: int) -> LogsOut:
    return LogsOut(workload_id=w.id, state=str(w.state), text=text, **page)  # type: ignore[arg-type]


@contextmanager
def _engine_errors(workload_id: str) -> Iterator[None]:
    """Executor errors of a read as the API's: no logs kept here (404), or the engine could
    not read them now (409)."""
    try:
        yield
    except NotSupported as e:
        raise NotFound(str(e)) from None
    except ExecutorError as e:
        raise Conflict(f"cannot read the logs of {workload_id}: {e}") from None


def tail(ctx: AppContext, p: Principal, workload_id: str, lines: int) -> LogsOut:
    """The last `lines` lines, read from the end of the log (at most
    `logread.TAIL_MAX_BYTES`); long lines cut with a marker."""
    w = _readable(ctx, p, workload_id)
    if w.state is WorkloadState.PENDING:
        return _out(w, "")
    with _engine_errors(workload_id):
        data = ctx.executor.log_tail(workload_id, lines)
    return _out(w, data.decode("utf-8", errors="replace"))


def page(ctx: AppContext, p: Principal, workload_id: str, offset: int, limit: int) -> LogsOut:
    """At most `limit` bytes of the log from byte `offset`, cut at a character boundary;
    `next_offset` is where the next page starts (equal to `offset`: nothing new yet)."""
    w = _readable(ctx, p, workload_id)
    if w.state is WorkloadState.PENDING:
        return _out(w, "", offset=offset, next_offset=offset)
    with _engine_errors(workload_id):
        chunks = ctx.executor.log_chunks(workload_id, offset)
        data = _take(chunks, min(limit, PAGE_MAX_BYTES))
    n = logread.utf8_prefix(data)
    text = data[:n].decode("utf-8", errors="replace")
    return _out(w, text, offset=offset, next_offset=offset + n)


def _take(chunks: Iterator[bytes], limit: int) -> bytes:
    buf = bytearray()
    try:
        for chunk in chunks:
            buf += chunk
            if len(buf) >= limit:
                break
    finally:
        if isinstance(chunks, Generator):
            chunks.close()  # the file or connection behind it, now
    return bytes(buf[:limit])


def stream(ctx: AppContext, p: Principal, workload_id: str) -> Iterator[bytes]:
    """The whole log as the JSON object `{workload_id, state, text}`, encoded as it is read.
    Access and executor errors are raised now (a problem answer); one during the read ends
    the text with a note saying so."""
    w = _readable(ctx, p, workload_id)
    chunks: Iterator[bytes] = iter(())
    if w.state is not WorkloadState.PENDING:
        with _engine_errors(workload_id):
            chunks = ctx.executor.log_chunks(workload_id)
    return _json_text(json.dumps({"workload_id": w.id, "state": str(w.state)}), chunks)


def _json_text(head: str, chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield (head[:-1] + ', "text": "').encode()
    try:
        for text in logread.utf8_text(chunks):
            yield json.dumps(text, ensure_ascii=False)[1:-1].encode()
    except (ExecutorError, OSError) as e:
        log.warning("a log read ended early: %s", e)
        note = f"\n[... the rest of the log could not be read: {e}]\n"
        yield json.dumps(note, ensure_ascii=False)[1:-1].encode()
    yield b'"}'
