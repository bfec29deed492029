"""Bounded log reads (review F6): a tail read reads only the end of a log, whatever its size;
long lines are cut; whole reads are chunks, never the whole file at once."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from gpupool.engines.common import logread
from gpupool.engines.local.executor import LOG_FILE, LocalExecutor


class CountingFile(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, n: int | None = -1) -> bytes:
        data = super().read(n)
        self.read_bytes += len(data)
        return data


def test_a_tail_read_reads_only_the_end():
    f = CountingFile(b"x" * 50_000_000 + b"\nthe end\nreally\n")
    assert logread.read_tail(f, 2) == b"the end\nreally\n"
    assert f.read_bytes <= logread.TAIL_MAX_BYTES


def test_a_tail_says_when_the_byte_cap_shortened_it():
    lines = b"".join(b"line %d\n" % i for i in range(10))
    out = logread.read_tail(io.BytesIO(lines), 9, max_bytes=30)
    assert out.startswith(logread.EARLIER_CUT)
    assert out.endswith(b"line 9\n") and b"line 5\n" not in out  # the partial line dropped


def test_long_lines_keep_their_start_and_a_marker():
    line = b"y" * (logread.LINE_MAX_BYTES + 500)
    out = logread.tail_of(line + b"\nshort\n", 2, starts_mid_line=False)
    first, second = out.split(b"\n")[:2]
    assert first == b"y" * logread.LINE_MAX_BYTES + logread.cut_marker(500).rstrip(b"\n")
    assert second == b"short"


def test_a_line_longer_than_the_read_is_shown_cut_not_dropped():
    out = logread.read_tail(io.BytesIO(b"z" * 100_000), 5, max_bytes=1000)
    assert out.startswith(logread.EARLIER_CUT) and out.count(b"z") == 1000


def test_file_chunks_stream_from_an_offset_up_to_the_size_at_the_start(tmp_path: Path):
    p = tmp_path / "log"
    p.write_bytes(b"a" * (3 * logread.CHUNK_BYTES + 10))
    chunks = logread.file_chunks(p, offset=5)
    with open(p, "ab") as f:
        f.write(b"written later")
    got = list(chunks)
    assert max(len(c) for c in got) <= logread.CHUNK_BYTES
    assert b"".join(got) == b"a" * (3 * logread.CHUNK_BYTES + 5)
    assert list(logread.file_chunks(tmp_path / "none")) == []


def test_utf8_pages_never_split_a_character():
    data = "ab€".encode()  # € is three bytes
    assert logread.utf8_prefix(data[:3]) == 2
    assert logread.utf8_prefix(data) == len(data)
    assert "".join(logread.utf8_text([data[:3], data[3:]])) == "ab€"


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_the_local_executors_tail_reads_the_end_of_a_huge_log(tmp_path: Path):
    """A 256 MiB (sparse) log: `logs(tail=...)` reads about 1 MiB of it, not all of it."""
    ex = LocalExecutor(tmp_path / "state", user_mode="single-user")
    d = tmp_path / "state" / "w1"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / LOG_FILE, "wb") as f:
        f.truncate(256 << 20)
        f.seek(0, os.SEEK_END)
        f.write(b"\nlast line\n")
    before = _rchar()
    assert ex.logs("w1", tail=1) == "last line\n"
    assert _rchar() - before < 4 << 20
