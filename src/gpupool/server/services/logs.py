"""A workload's output, read with bounded memory (review F6): the whole of it streamed, a
page from a byte offset, or the last lines read from the end (gpupool.engines.common.logread).

Every form answers `{workload_id, state, runs, note, text}` (pages add `offset` and
`next_offset`); the whole read is that same JSON object written as the log is read, so a
400 MB log costs the server one chunk of memory, not 400 MB.

Work that was preempted and requeued keeps its earlier runs' output (issue 30 item 4): while
it waits to run again its log is that output, and `note` says it was requeued; once it runs
again, the new run follows a separator line (gpupool.engines.common.reruns). Work that never ran
has no output, and the executor is not asked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gpupool.domain import Workload, WorkloadState
from gpupool.engines.common import logread, reruns
from gpupool.engines.common.executor import ExecutorError, NotSupported, logs_of
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import PermissionDenied
from gpupool.server.schemas.workloads import LogsOut
from gpupool.server.services.workloads import visible_or_404
from gpupool.store import Conflict, EventRepo, NotFound, WorkloadRepo

log = logging.getLogger(__name__)
#: a page (`?offset=`) carries at most this many bytes of the log
PAGE_MAX_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class _Log:
    """The workload whose log is read, and what the answer says of its runs."""

    w: Workload
    runs: int
    note: str | None

    @property
    def has_output(self) -> bool:
        """Whether any run of it may have written output (else the executor is not asked)."""
        return self.runs > 0 or self.w.state is not WorkloadState.PENDING

    def head(self) -> dict[str, object]:
        return {
            "workload_id": self.w.id,
            "state": str(self.w.state),
            "runs": self.runs,
            "note": self.note,
        }


def _readable(ctx: AppContext, p: Principal, workload_id: str) -> _Log:
    """The workload, if `p` may read its logs: its owner, a tenant-admin above it, an admin.
    Work `p` may not see at all is a 404, as if it did not exist."""
    with ctx.store.read() as s:
        rec = WorkloadRepo(s).record(workload_id)
        w = visible_or_404(p, rec.workload)
        if w.owner != p.name and not p.can_manage(w.tenant):
            raise PermissionDenied(
                f"only {w.owner} (the owner), a tenant-admin of {w.tenant} or an admin "
                "may read its logs"
            )
        last = None
        if w.preemptions:
            found = EventRepo(s).list(workload_id=w.id, kind="workload.preempted", limit=1)
            last = found[0][1].at if found else None
    position = rec.pending.position if rec.pending is not None else None
    return _Log(w, runs_of(w), requeue_note(w, last, position))


def runs_of(w: Workload) -> int:
    """How many runs `w`'s output covers: one per preemption, and the current one once it
    was started (`started_at` is cleared when preempted work is requeued)."""
    current = w.started_at is not None and w.state is not WorkloadState.PREEMPTED
    return w.preemptions + (1 if current else 0)


def requeue_note(w: Workload, preempted_at: float | None, position: int | None) -> str | None:
    """What a reader of `w`'s log should know of its runs: None for work never preempted."""
    if not w.preemptions:
        return None
    when = f" at {reruns.hhmm(preempted_at)}" if preempted_at is not None else ""
    runs = runs_of(w)
    earlier = "run" if w.preemptions == 1 else f"{w.preemptions} runs"
    if w.state is WorkloadState.PENDING:
        place = f" (#{position} in the queue)" if position else ""
        return (
            f"{w.id} was preempted{when} and requeued; it waits to run again{place}. "
            f"The output is its earlier {earlier}'s."
        )
    if w.state is WorkloadState.PREEMPTED:
        return f"{w.id} was preempted{when} and not requeued (it does not allow requeueing)."
    if runs <= w.preemptions:  # requeued, admitted again, not started yet
        return f"{w.id} was preempted{when}, requeued, and is starting again."
    return (
        f"{w.id} was preempted{when} and requeued: this is run {runs}; its output follows "
        f"the earlier {earlier}'s, after a '--- requeued after preemption' line."
    )


def _out(lg: _Log, text: str, **page: int) -> LogsOut:
    return LogsOut(**lg.head(), text=text, **page)  # type: ignore[arg-type]


@contextmanager
def _engine_errors(lg: _Log) -> Iterator[list[_Log]]:
    """Executor errors of a read as the API's: no logs kept here (404), or the engine could
    not read them now (409). Preempted work waiting to run again is not refused (its earlier
    run has ended; there is nothing to retry): the answer is an empty log whose note says
    why, the `_Log` in the yielded list replaced by one with that note."""
    box = [lg]
    try:
        yield box
    except ExecutorError as e:
        if lg.w.state is WorkloadState.PENDING:
            note = f"{lg.note or ''} Its earlier output cannot be read: {e}".strip()
            box[0] = _Log(lg.w, lg.runs, note)
        elif isinstance(e, NotSupported):
            raise NotFound(str(e)) from None
        else:
            raise Conflict(f"cannot read the logs of {lg.w.id}: {e}") from None


def tail(ctx: AppContext, p: Principal, workload_id: str, lines: int) -> LogsOut:
    """The last `lines` lines, read from the end of the log (at most
    `logread.TAIL_MAX_BYTES`); long lines cut with a marker."""
    lg = _readable(ctx, p, workload_id)
    data = b""
    if lg.has_output:
        with _engine_errors(lg) as box:
            data = logs_of(ctx.executor).log_tail(workload_id, lines)
        lg = box[0]
    return _out(lg, data.decode("utf-8", errors="replace"))


def page(ctx: AppContext, p: Principal, workload_id: str, offset: int, limit: int) -> LogsOut:
    """At most `limit` bytes of the log from byte `offset`, cut at a character boundary;
    `next_offset` is where the next page starts (equal to `offset`: nothing new yet)."""
    lg = _readable(ctx, p, workload_id)
    data = b""
    if lg.has_output:
        with _engine_errors(lg) as box:
            chunks = logs_of(ctx.executor).log_chunks(workload_id, offset)
            data = _take(chunks, min(limit, PAGE_MAX_BYTES))
        lg = box[0]
    n = logread.utf8_prefix(data)
    text = data[:n].decode("utf-8", errors="replace")
    return _out(lg, text, offset=offset, next_offset=offset + n)


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
    """The whole log as the JSON object `{workload_id, state, runs, note, text}`, encoded as
    it is read.
    Access and executor errors are raised now (a problem answer); one during the read ends
    the text with a note saying so."""
    lg = _readable(ctx, p, workload_id)
    chunks: Iterator[bytes] = iter(())
    if lg.has_output:
        with _engine_errors(lg) as box:
            chunks = logs_of(ctx.executor).log_chunks(workload_id)
        lg = box[0]
    return _json_text(json.dumps(lg.head()), chunks)


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
