"""Watches of the fake Kubernetes API server (`?watch=true` on the pod and node lists).

Every change of a pod or node is kept in `FakeKube.history` as (resourceVersion, resource,
object before, object after). A watch from resourceVersion N streams, as chunked JSON lines,
the changes after N that match its label and field selectors, the way kube-apiserver does:
an object that starts matching is ADDED, one that stops matching (or is deleted) DELETED,
else MODIFIED. A version older than the last `FakeKube.compact()` is answered with an ERROR
event carrying 410 Gone ("too old resource version"). `allowWatchBookmarks=true` gets a
BOOKMARK at the newest version when the stream ends at `timeoutSeconds`. The test's control
handle: `compact()` (forget the history and end every open stream: whoever watches again
from an older version gets 410), `end_watches()` (every open stream ends now, as on an API
server restart), `fail_watches(n)` (the next n watch requests are answered 500) and
`pause()`/`resume()` (open streams hold their events: a watcher that is behind).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


class WatchHub:
    """The change history and the open watches of one `FakeKube`."""

    def __init__(self, kube: Any):
        self.kube = kube
        #: (resourceVersion, resource ("pods" or "nodes"), before, after); sorted by version
        self.history: list[tuple[int, str, dict[str, Any] | None, dict[str, Any] | None]] = []
        self.compacted = 0
        self.generation = 0  # end_watches() bumps it: streams of an older one end
        self.failures = 0
        self.paused = False
        self.opened = 0  # watch requests answered 200
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    # -- recording (called under the kube's lock) ------------------------------------------
    def changed(
        self, resource: str, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        """Record a change; `after` None is a deletion (a copy of `before` at a new version
        is what watchers get)."""
        if after is None:
            assert before is not None
            after_rv = self.kube.rv()
            gone = copy.deepcopy(before)
            gone["metadata"]["resourceVersion"] = after_rv
            self.history.append((int(after_rv), resource, gone, None))
        else:
            rv = int(after["metadata"]["resourceVersion"])
            self.history.append((rv, resource, before, copy.deepcopy(after)))
        self._notify()

    def touch_node(self, name: str, before: dict[str, Any] | None) -> None:
        """Record a node's change (under the kube's lock): a new version, watchers told."""
        node = self.kube.nodes[name]
        node["metadata"]["resourceVersion"] = self.kube.rv()
        self.changed("nodes", before, node)

    def touch_pod(self, key: tuple[str, str], before: dict[str, Any] | None) -> None:
        """Record a pod's change (under the kube's lock); a pod no longer stored is a
        deletion."""
        pod = self.kube.pods.get(key)
        if pod is None:
            if before is not None:
                self.changed("pods", before, None)
            return
        pod["metadata"]["resourceVersion"] = self.kube.rv()
        self.changed("pods", before, pod)

    def _notify(self) -> None:
        for loop, event in list(self._waiters):
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    # -- control -----------------------------------------------------------------------------
    def compact(self) -> int:
        """Forget the history up to now: a watch from an older version gets 410 Gone."""
        with self.kube.lock:
            self.compacted = int(self.kube.rv())
            self.history.clear()
            self.generation += 1
            self._notify()
            return self.compacted

    def end_watches(self) -> None:
        with self.kube.lock:
            self.generation += 1
            self._notify()

    def pause(self) -> None:
        with self.kube.lock:
            self.paused = True

    def resume(self) -> None:
        with self.kube.lock:
            self.paused = False
            self._notify()

    def fail_watches(self, n: int) -> None:
        with self.kube.lock:
            self.failures = n

    # -- serving -------------------------------------------------------------------------------
    def response(self, resource: str, request: Request, matches: Any) -> Response:
        """The watch stream for `resource`; `matches(obj, query)` applies the selectors."""
        q = request.query_params
        with self.kube.lock:
            if self.failures > 0:
                self.failures -= 1
                return Response("etcd is down", status_code=500)
            self.opened += 1
        raw = q.get("resourceVersion") or "0"
        timeout = float(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks") in ("true", "True", "1")
        return StreamingResponse(
            self._stream(resource, int(raw), timeout, bookmarks, q, matches),
            media_type="application/json",
        )

    async def _stream(
        self,
        resource: str,
        since: int,
        timeout: float,
        bookmarks: bool,
        q: Any,
        matches: Any,
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        deadline = loop.time() + timeout
        with self.kube.lock:
            generation = self.generation
            if since and since < self.compacted:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.compacted})",
                    "reason": "Expired",
                    "code": 410,
                }
                yield _line("ERROR", status)
                return
            if not since:  # "any": the current objects as ADDED, then the changes
                store = {
                    "pods": self.kube.pods,
                    "nodes": self.kube.nodes,
                    "jobs": self.kube.native.jobs,
                }[resource]
                first = [copy.deepcopy(o) for o in store.values() if matches(o, q)]
                since = int(self.kube.rv())
            else:
                first = []
            self._waiters.add(waiter)
        try:
            for obj in first:
                yield _line("ADDED", obj)
            while True:
                waiter[1].clear()
                out: list[bytes] = []
                with self.kube.lock:
                    start = bisect.bisect_right(self.history, since, key=lambda h: h[0])
                    pending = [] if self.paused else self.history[start:]
                    for rv, res, before, after in pending:
                        since = rv
                        if res != resource:
                            continue
                        was = before is not None and matches(before, q)
                        now = after is not None and matches(after, q)
                        if now:
                            out.append(_line("MODIFIED" if was else "ADDED", after))
                        elif was:  # deleted, or left the selection (its last version)
                            out.append(_line("DELETED", after if after is not None else before))
                    ended = self.generation != generation
                    newest = self.kube.rv() if bookmarks else None
                for line in out:
                    yield line
                if ended:
                    return
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if newest is not None:
                        mark = {"kind": {"pods": "Pod", "jobs": "Job"}.get(resource, "Node")}
                        mark["metadata"] = {"resourceVersion": newest}  # type: ignore[assignment]
                        mark["apiVersion"] = "v1"
                        yield _line("BOOKMARK", mark)
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter[1].wait(), timeout=remaining)
        finally:
            with self.kube.lock:
                self._waiters.discard(waiter)
