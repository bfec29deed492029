"""An outbound webhook: JSON POSTs to one admin-configured URL, sent by one background thread.

`send` only queues (it never waits on the network), so a slow or failing receiver never
blocks the caller (the scheduler loop); the thread posts with a short timeout and logs a
warning when the receiver fails, answers an error or does not answer in time. What is not
delivered is not retried (the `budget.spent` event in the store says the same). Used for
the `budget.spent` announcement (`GPUPOOL_BUDGET_WEBHOOK_URL`, `gpupool up --budget-webhook`).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any
from urllib.parse import urlsplit

import httpx

log = logging.getLogger(__name__)

#: how long one POST may take (connect, send, answer), in seconds
TIMEOUT_S = 5.0
#: posts that may wait for the thread; more are dropped with a warning
MAX_QUEUED = 256


def redact_url(text: str) -> str:
    """What a log line or an error may show of a URL: `scheme://host[:port]/…`, never its
    user info, path, query or fragment (a token may be in any of them). Without a
    `scheme://` and a host it can read, only `…` (after the scheme, if any)."""
    text = text.strip()
    scheme, sep, _ = text.partition("://")
    shown = f"{scheme.lower()}://" if sep and scheme.isascii() and scheme.isalpha() else ""
    try:
        u = urlsplit(text)
        host, port = u.hostname, u.port
    except ValueError:  # an unclosed [IPv6 or a port that is no number
        host, port = None, None
    if not shown or not host or not host.isascii() or not host.isprintable():
        return shown + "…"
    host = f"[{host}]" if ":" in host else host
    return f"{shown}{host}{f':{port}' if port is not None else ''}/…"


def scrub(message: str, url: str) -> str:
    """`message` (an exception's text, say) without `url` or the parts of it that
    `redact_url` leaves out."""
    u = urlsplit(url)
    parts = {url, url.strip(), u.netloc, u.path, u.query, u.fragment, u.netloc.rpartition("@")[0]}
    for part in sorted((p for p in parts if len(p) > 1), key=len, reverse=True):
        message = message.replace(part, "…")
    return message


def webhook_url(text: str, name: str = "GPUPOOL_BUDGET_WEBHOOK_URL") -> str:
    """`text` if it is an http:// or https:// URL with a host (and a port, if any, that is a
    number); ValueError naming `name`, showing the value only as `redact_url` does."""
    try:
        u = urlsplit(text.strip())
        ok = u.scheme in ("http", "https") and bool(u.hostname)
        u.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name}={redact_url(text)!r} (shown without what may be secret): give an http:// "
            "or https:// URL with a host, e.g. https://hooks.example.org/gpupool"
        )
    return text.strip()


class Webhook:
    """POSTs payloads to `url` in order, from one daemon thread started on the first `send`."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S, max_queued: int = MAX_QUEUED):
        self.url = url
        #: what the log names: scheme, host and port (a secret in the user info, path or
        #: query stays out of logs)
        self.where = redact_url(url)
        self.timeout_s = timeout_s
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(max_queued)
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = 0  # queued or being posted
        #: payloads the receiver accepted (2xx) and those that failed, since the start
        self.delivered = 0
        self.failed = 0

    def send(self, payload: dict[str, Any]) -> bool:
        """Queue `payload` for the thread; False (and a warning) when the queue is full."""
        with self._lock:
            try:
                self._queue.put_nowait(payload)
            except queue.Full:
                n = self._queue.qsize()
                log.warning("webhook %s: %d posts waiting; dropped one", self.where, n)
                return False
            self._busy += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)
                self._thread.start()
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until every queued payload was posted or failed."""
        with self._lock:
            return self._lock.wait_for(lambda: self._busy == 0, timeout_s)

    def close(self) -> None:
        """Stop the thread after what is queued (it is a daemon: exiting never waits on it)."""
        with self._lock:
            if self._thread is None:
                return
        self._queue.put(None)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client:
            while True:
                payload = self._queue.get()
                if payload is None:
                    return
                ok = False
                try:
                    r = client.post(self.url, json=payload)
                    ok = r.is_success
                    if not ok:
                        log.warning(
                            "webhook %s answered %d; not retried", self.where, r.status_code
                        )
                except Exception as e:  # any failure of the receiver: the thread goes on
                    why = scrub(str(e), self.url) or type(e).__name__
                    log.warning("webhook %s failed: %s; not retried", self.where, why)
                with self._lock:
                    if ok:
                        self.delivered += 1
                    else:
                        self.failed += 1
                    self._busy -= 1
                    self._lock.notify_all()
