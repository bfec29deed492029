"""Listing an app's routes (FastAPI nests included routers in recent versions)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def iter_routes(routes: Iterable[Any]) -> Iterator[tuple[str, str]]:
    """(method, path) of every HTTP route, included routers expanded; HEAD is left out."""
    for r in routes:
        if hasattr(r, "effective_candidates"):
            yield from iter_routes(r.effective_candidates())
            continue
        methods = getattr(r, "methods", None)
        path = getattr(r, "path", None)
        if not methods or path is None:
            continue
        for m in sorted(methods):
            if m != "HEAD":
                yield m, path
