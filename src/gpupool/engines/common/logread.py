"""Bounded reads of a workload's output, shared by the executors that keep it in files.

A log can be as big as a job makes it (hundreds of MB); the server never holds one whole.
Two reads exist (the executor contract's `log_chunks` and `log_tail`, `engines.common.executor`):

- the whole output, or the part after a byte offset, as a lazy iterator of chunks of at
  most `CHUNK_BYTES`, up to the size the log had when the read began;
- the last lines, read from the end: at most `TAIL_MAX_BYTES` are read, whatever the file's
  size; a line longer than `LINE_MAX_BYTES` keeps its start and ends with a cut marker, and
  an answer the byte cap shortened starts with `EARLIER_CUT`.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

#: one chunk of a streamed or paged read
CHUNK_BYTES = 64 * 1024
#: a tail read reads at most this much from the end of a log
TAIL_MAX_BYTES = 1 << 20
#: a line of a tail read longer than this keeps its first LINE_MAX_BYTES, then a marker
LINE_MAX_BYTES = 16 * 1024
#: first line of a tail answer the byte cap shortened (fewer lines than asked came back)
EARLIER_CUT = b"[... earlier output not shown: a tail read covers only the end of the log]\n"


def cut_marker(n: int) -> bytes:
    """What ends a line of a tail read that was cut, `n` bytes taken off."""
    return f" [... {n} bytes of this line cut]\n".encode()


def tail_of(
    data: bytes, lines: int, *, starts_mid_line: bool, max_line: int = LINE_MAX_BYTES
) -> bytes:
    """The last `lines` lines of `data` (the end of a log; `starts_mid_line`: it was cut at
    the front, so its first line is partial), long lines cut to `max_line` bytes."""
    if lines <= 0 or not data:
        return b""
    pieces = data.split(b"\n")
    last = pieces.pop()  # after the last newline: b"" when data ends with one
    out = [p + b"\n" for p in pieces] + ([last] if last else [])
    shortened = False
    if starts_mid_line and len(out) > 1:
        out.pop(0)  # a partial line: the lines before it are gone too
        shortened = len(out) < lines
    elif starts_mid_line:
        shortened = True  # one line longer than the whole read
    out = out[-lines:]
    cut = [_cut_line(line, max_line) for line in out]
    return (EARLIER_CUT if shortened else b"") + b"".join(cut)


def _cut_line(line: bytes, max_line: int) -> bytes:
    body = line[:-1] if line.endswith(b"\n") else line
    if len(body) <= max_line:
        return line
    return body[:max_line] + cut_marker(len(body) - max_line)


def read_tail(f: BinaryIO, lines: int, max_bytes: int = TAIL_MAX_BYTES) -> bytes:
    """`tail_of` the end of the seekable file `f`: reads at most `max_bytes` bytes."""
    size = f.seek(0, os.SEEK_END)
    start = max(0, size - max_bytes)
    f.seek(start)
    return tail_of(f.read(size - start), lines, starts_mid_line=start > 0)


def file_tail(path: Path, lines: int, max_bytes: int = TAIL_MAX_BYTES) -> bytes:
    """`read_tail` of the file at `path`; empty when there is none."""
    try:
        with open(path, "rb") as f:
            return read_tail(f, lines, max_bytes)
    except FileNotFoundError:
        return b""


def file_chunks(path: Path, offset: int = 0) -> Iterator[bytes]:
    """The bytes of `path` from `offset` up to its size now, in chunks of at most
    CHUNK_BYTES. The file is opened now (a missing one: no chunks) and read as the iterator
    is consumed; closing the iterator closes it."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - the generator below owns and closes it
    except FileNotFoundError:
        return iter(())
    size = f.seek(0, os.SEEK_END)
    f.seek(min(max(0, offset), size))
    return _chunks(f, size - f.tell())


def _chunks(f: BinaryIO, remaining: int) -> Iterator[bytes]:
    with f:
        while remaining > 0:
            chunk = f.read(min(CHUNK_BYTES, remaining))
            if not chunk:
                return
            remaining -= len(chunk)
            yield chunk


def skip_bytes(chunks: Iterable[bytes], offset: int) -> Iterator[bytes]:
    """`chunks` without their first `offset` bytes (for sources that cannot seek)."""
    for chunk in chunks:
        if offset >= len(chunk):
            offset -= len(chunk)
            continue
        yield chunk[offset:] if offset else chunk
        offset = 0


def rechunk(data: bytes) -> Iterator[bytes]:
    """`data` in chunks of at most CHUNK_BYTES (for logs already in memory)."""
    for i in range(0, len(data), CHUNK_BYTES):
        yield data[i : i + CHUNK_BYTES]


def last_bytes(chunks: Iterable[bytes], max_bytes: int) -> tuple[bytes, bool]:
    """The last `max_bytes` bytes of a stream of `chunks` (memory: about `max_bytes`), and
    whether anything before them was dropped."""
    buf = bytearray()
    dropped = False
    for chunk in chunks:
        buf += chunk
        if len(buf) > 2 * max_bytes:
            del buf[: len(buf) - max_bytes]
            dropped = True
    if len(buf) > max_bytes:
        del buf[: len(buf) - max_bytes]
        dropped = True
    return bytes(buf), dropped


def utf8_text(chunks: Iterable[bytes]) -> Iterator[str]:
    """Decode a stream of chunks as UTF-8 (bad bytes replaced), never splitting a character
    across two chunks."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    rest = decoder.decode(b"", final=True)
    if rest:
        yield rest


def utf8_prefix(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character
    (a page cut there is decoded whole, and the next page starts at a character)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data)
    pending, _ = decoder.getstate()
    return len(data) - len(pending)
