"""Local caches of Kubernetes objects fed by a list and then a watch (an "informer").

An `Informer` lists its objects once (keeping the list's resourceVersion), then follows a
`kubernetes.watch.Watch` stream from that version, asking for bookmarks so a quiet stream
still advances its version. It keeps the newest version of every object by
`namespace/name` and calls `on_change(type, object)` for each change it applies
(ADDED/MODIFIED/DELETED), so the engine wakes the loop that cares instead of polling.

- A watch ends after `watch_timeout_s` (the server closes it) and is re-opened from the
  last version seen: no request in between, nothing lost.
- 410 Gone (the version is older than the server keeps): the objects are listed again and
  the cache replaced; the differences are reported as changes (one per object that really
  changed: none lost, none repeated).
- Any other error (connection refused, 5xx, a broken stream): listed again after a backoff
  that doubles from `backoff_s` up to `max_backoff_s` and resets once a list succeeds.
- Every `resync_s` on `clock` the objects are listed again anyway (a full resync; changes
  found are reported like a 410's).

`snapshot()` is the cache as a list (None until the first list succeeded). Counters in
`stats` (lists, watches, events, gone, errors) are what bench/k8s_engine.py reports.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.clock import Clock
from gpupool.engines.kubernetes.client import KubeError

log = logging.getLogger(__name__)

#: (the objects, the list's resourceVersion)
Lister = Callable[[], tuple[list[dict[str, Any]], str]]
OnChange = Callable[[str, Mapping[str, Any]], None]


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def version_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    gone: int = 0
    errors: int = 0


class Informer:
    """One kind of object kept current by list + watch (see the module docstring).
    `watch_fn` is the official client's list method (e.g. `CoreV1Api.list_node`) and
    `selectors` its label/field selector keyword arguments."""

    def __init__(
        self,
        name: str,
        lister: Lister,
        watch_fn: Callable[..., Any],
        clock: Clock,
        *,
        selectors: Mapping[str, str] | None = None,
        on_change: OnChange | None = None,
        resync_s: float = 600.0,
        watch_timeout_s: int = 300,
        backoff_s: float = 0.2,
        max_backoff_s: float = 30.0,
    ):
        self.name = name
        self.lister = lister
        self.watch_fn = watch_fn
        self.clock = clock
        self.selectors = {k: v for k, v in (selectors or {}).items() if v}
        self.on_change = on_change or (lambda kind, obj: None)
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stats = WatchStats()
        self.resource_version = ""
        self._items: dict[str, dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self._listed_at = 0.0

    # -- reading ---------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]] | None:
        """The objects as last seen (None: not listed yet)."""
        with self._lock:
            return None if self._items is None else list(self._items.values())

    @property
    def synced(self) -> bool:
        return self._items is not None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"k8s-watch-{self.name}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (the stream ends at its next event or time-out; the thread is a
        daemon)."""
        self._stopping.set()
        w = self._watch
        if w is not None:
            w.stop()

    # -- the loop --------------------------------------------------------------------------
    def relist(self) -> None:
        """List the objects, replace the cache and report what changed."""
        items, rv = self.lister()
        self.stats.lists += 1
        fresh = {key_of(o): o for o in items}
        with self._lock:
            old = self._items or {}
            self._items = fresh
            self.resource_version = rv
        self._listed_at = self.clock.now()
        for k, o in fresh.items():
            before = old.get(k)
            if before is None:
                self.on_change("ADDED", o)
            elif version_of(before) != version_of(o):
                self.on_change("MODIFIED", o)
        for k, o in old.items():
            if k not in fresh:
                self.on_change("DELETED", o)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        rv = version_of(obj)
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        k = key_of(obj)
        with self._lock:
            items = self._items if self._items is not None else {}
            if kind == "DELETED":
                items.pop(k, None)
            else:
                items[k] = obj
            self._items = items
            self.resource_version = rv or self.resource_version
        self.stats.events += 1
        self.on_change(kind, obj)

    def _follow(self) -> None:
        """One watch from `resource_version` until the server ends it."""
        from kubernetes import watch

        remaining = self.resync_s - (self.clock.now() - self._listed_at)
        timeout = int(max(1, min(self.watch_timeout_s, remaining)))
        w = self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        self.stats.watches += 1
        for event in w.stream(  # type: ignore[no-untyped-call]
            self.watch_fn,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _request_timeout=(10, timeout + 30),
            **self.selectors,
        ):
            if self._stopping.is_set():
                return
            raw = event.get("raw_object") if isinstance(event, dict) else None
            if isinstance(raw, dict):
                self._apply(str(event.get("type", "")), raw)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        backoff = self.backoff_s
        need_list = not self.synced
        while not self._stopping.is_set():
            try:
                if need_list or self.clock.now() - self._listed_at >= self.resync_s:
                    self.relist()
                    need_list = False
                    backoff = self.backoff_s
                self._follow()
            except ApiException as e:
                if e.status == 410:
                    self.stats.gone += 1
                    log.info("watch of %s: 410 Gone; listing again", self.name)
                    need_list = True
                    continue
                need_list = self._failed(f"HTTP {e.status} {e.reason}", backoff)
                backoff = min(self.max_backoff_s, backoff * 2)
            except (KubeError, Exception) as e:  # noqa: BLE001 - connection errors of urllib3
                if self._stopping.is_set():
                    return
                need_list = self._failed(str(e), backoff)
                backoff = min(self.max_backoff_s, backoff * 2)

    def _failed(self, why: str, backoff: float) -> bool:
        self.stats.errors += 1
        log.warning("watch of %s failed (%s); listing again in %.1f s", self.name, why, backoff)
        self._stopping.wait(backoff)
        return True
