"""How the CLI shows start-time forecasts (`pending.forecast`, docs/user-guide.md "When will
it start?"): a short cell for `gpupool queue` and a line for `gpupool show`."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from gpupool.cli import tables


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _span(seconds: float) -> str:
    """45s, 12m, 3h, 5d (the largest whole unit)."""
    return tables.age(0.0, now=seconds)


def starts_cell(f: dict[str, Any] | None, now: float | None = None) -> str:
    """'~12m..40m' (expected, and at the latest), '~12m', 'now', '>1d' (not within the
    horizon), '-' (no forecast yet): relative to `now`, short enough for an 80-column row."""
    if not f:
        return "-"
    now = time.time() if now is None else now
    exp, late = _epoch(f.get("expected")), _epoch(f.get("latest"))
    if exp is None:
        until = _epoch(f.get("until"))
        return ">" + _span(max(0.0, (until or now) - now))
    head = "now" if exp - now < 60 else "~" + _span(exp - now)
    if late is None:
        return head + "+"
    if late - exp >= 60 and late - now >= 60:
        return head + ".." + _span(max(0.0, late - now))
    return head


def starts_line(f: dict[str, Any]) -> str:
    """The forecast in words with what it rests on (`gpupool show`)."""
    runtime = tables.duration(f.get("runtime_s"))
    return f"{f['text']}; {f['basis']}. It runs about {runtime}: {f['runtime_basis']}"
