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


def webhook_url(text: str, name: str = "GPUPOOL_BUDGET_WEBHOOK_URL") -> str:
    """`text` if it is an http:// or https:// URL with a host; ValueError naming `name`."""
    u = urlsplit(text.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(
            f"{name}={text!r}: give an http:// or https:// URL, e.g. https://hooks.example.org/gpupool"
        )
    return text.strip()


class Webhook:
    """POSTs payloads to `url` in order, from one daemon thread started on the first `send`."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S, max_queued: int = MAX_QUEUED):
        self.url = url
        u = urlsplit(url)
        #: what the log names: scheme, host and port (a secret in the path stays out of logs)
        self.where = f"{u.scheme}://{u.netloc.rpartition('@')[2]}"
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
                    why = str(e) or type(e).__name__
                    log.warning("webhook %s failed: %s; not retried", self.where, why)
                with self._lock:
                    if ok:
                        self.delivered += 1
                    else:
                        self.failed += 1
                    self._busy -= 1
                    self._lock.notify_all()
