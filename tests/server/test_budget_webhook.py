"""The budget webhook (issue 35 part 2, `warn` mode's notification): a spent budget is POSTed
as JSON to the admin's URL once per period, across restarts, from a background thread; a
receiver that never answers leaves the scheduler loop unaffected. Real HTTP servers on
localhost receive the POSTs."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.settings import Settings
from gpupool.server.webhook import Webhook, redact_url, scrub
from gpupool.store import EventRepo
from tests.server.test_budgets_reservations import state, use


@contextmanager
def receiver() -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on localhost that keeps every JSON body POSTed to it."""
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            n = int(self.headers["Content-Length"])
            assert self.headers["Content-Type"] == "application/json"
            got.append(json.loads(self.rfile.read(n)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/hooks/gpupool", got
    finally:
        srv.shutdown()
        srv.server_close()


def _loop(world, url: str, timeout_s: float = 5.0) -> SchedulerLoop:
    world.ctx.settings = replace(world.ctx.settings, budget_webhook_url=url)
    loop = SchedulerLoop(world.ctx)
    assert loop.webhook is not None and loop.webhook.url == url
    loop.webhook.timeout_s = timeout_s
    return loop


def _spent(world) -> list:
    with world.ctx.store.read() as s:
        return [e for _, e in EventRepo(s).list(kind="budget.spent")]


def test_a_spent_budget_is_posted_once_per_period_across_restarts(world):
    world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 1, "mode": "warn"})
    use(world, "lab", "ann", 2)
    with receiver() as (url, got):
        loop = _loop(world, url)
        wid = world.submit(gpus=1)["id"]
        loop.run_once()
        assert state(world, wid)["state"] in ("admitted", "starting", "running")
        assert loop.webhook is not None and loop.webhook.wait_idle(10)
        assert loop.webhook.delivered == 1
        (body,) = got
        assert body["kind"] == "budget.spent" and body["tenant"] == "lab"
        assert body["mode"] == "warn" and body["period"] == "2026-05"
        assert body["used_gpu_hours"] == 2 and body["gpu_hours"] == 1
        assert "its work runs as before" in body["message"]
        assert body["message"] == _spent(world)[0].message  # the event's own words
        loop.run_once()  # the same period: nothing more
        again = _loop(world, url)  # a restart: nothing in memory, the store remembers
        again.run_once()
        assert again.webhook is not None and again.webhook.wait_idle(10)
        assert len(got) == 1 and again.webhook.delivered == 0


def test_a_receiver_that_never_answers_leaves_the_loop_unaffected(world, caplog):
    world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 1, "mode": "hold"})
    use(world, "lab", "ann", 2)
    # accepts connections (the kernel's backlog) but never reads or answers
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    try:
        url = f"http://127.0.0.1:{mute.getsockname()[1]}/"
        loop = _loop(world, url, timeout_s=0.5)
        held = world.submit(gpus=1)["id"]
        other = world.submit("outsider", tenant="other", gpus=1)["id"]
        with caplog.at_level(logging.WARNING, logger="gpupool.server.webhook"):
            report = loop.run_once()
            # the pass finished while the POST still hangs: it never waited on it
            assert loop.webhook is not None and not loop.webhook.wait_idle(0)
            assert state(world, held)["state"] == "pending"
            assert state(world, other)["state"] in ("admitted", "starting", "running")
            assert other in report.admitted and len(_spent(world)) == 1
            loop.run_once()  # and the next pass runs as well
            assert loop.webhook.wait_idle(10)  # the POST timed out and was dropped
        assert loop.webhook.failed == 1 and loop.webhook.delivered == 0
        assert any("not retried" in r.getMessage() for r in caplog.records)
    finally:
        mute.close()


def test_the_setting_takes_an_http_url_only():
    s = Settings.from_env({"GPUPOOL_BUDGET_WEBHOOK_URL": "https://hooks.example.org/x"})
    assert s.budget_webhook_url == "https://hooks.example.org/x"
    assert Settings.from_env({}).budget_webhook_url is None
    for bad in ("ftp://hooks.example.org/x", "hooks.example.org", "http://", "http://h:x/"):
        with pytest.raises(ValueError, match="give an http:// or https:// URL"):
            Settings.from_env({"GPUPOOL_BUDGET_WEBHOOK_URL": bad})


SECRET = "s3cr3t-T0KEN"
#: malformed webhook URLs that carry the secret in their user info, path or query
BAD_WITH_SECRET = {
    f"ftp://bot:{SECRET}@hooks.example.org/x?token={SECRET}": "ftp://hooks.example.org/…",
    f"hooks.example.org/hook/{SECRET}": "…",
    f"{SECRET}": "…",
    f"http://bot:{SECRET}@/x?token={SECRET}": "http://…",
    f"https://[::1/x?token={SECRET}": "https://…",
    f"https://hooks.example.org:port{SECRET}/x": "https://…",
    f"gopher://{SECRET}:{SECRET}@hooks.example.org:70/{SECRET}#{SECRET}": (
        "gopher://hooks.example.org:70/…"
    ),
}


@pytest.mark.parametrize("bad", sorted(BAD_WITH_SECRET))
def test_a_malformed_url_is_refused_without_showing_its_secret(bad):
    with pytest.raises(ValueError) as e:
        Settings.from_env({"GPUPOOL_BUDGET_WEBHOOK_URL": bad})
    text = str(e.value)
    assert SECRET not in text and "GPUPOOL_BUDGET_WEBHOOK_URL" in text
    assert repr(BAD_WITH_SECRET[bad]) in text and "give an http:// or https:// URL" in text


def test_redact_url_keeps_scheme_host_and_port_only():
    assert redact_url(f"https://bot:{SECRET}@Hooks.Example.org:8443/h/{SECRET}?t={SECRET}") == (
        "https://hooks.example.org:8443/…"
    )
    assert redact_url("http://[fe80::1]:9/x") == "http://[fe80::1]:9/…"
    assert redact_url("http://hooks.example.org") == "http://hooks.example.org/…"
    url = f"http://bot:{SECRET}@h.example/p/{SECRET}?token={SECRET}"
    said = scrub(f"failed to post to {url}; again at /p/{SECRET} with token={SECRET}", url)
    assert SECRET not in said and said.startswith("failed to post to …")


def test_delivery_failures_are_logged_without_the_urls_secret(world, caplog):
    """A receiver that refuses connections, reached through a URL with a token in its user
    info and query: the warnings name scheme, host and port only; the setting's repr too."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: the POST fails at once
    url = f"http://bot:{SECRET}@127.0.0.1:{port}/hooks/{SECRET}?token={SECRET}"
    assert SECRET not in repr(replace(world.ctx.settings, budget_webhook_url=url))
    hook = Webhook(url, timeout_s=2)
    with caplog.at_level(logging.WARNING, logger="gpupool.server.webhook"):
        assert hook.send({"n": 1}) and hook.wait_idle(10)
    assert hook.failed == 1
    said = [r.getMessage() for r in caplog.records]
    assert said and all(SECRET not in m for m in said), said
    assert any(f"http://127.0.0.1:{port}/… failed" in m for m in said), said


def test_a_full_queue_drops_with_a_warning_and_never_blocks(caplog):
    mute = socket.socket()  # the first POST hangs here: the queue fills behind it
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    try:
        hook = Webhook(f"http://127.0.0.1:{mute.getsockname()[1]}/", timeout_s=0.5, max_queued=1)
        with caplog.at_level(logging.WARNING, logger="gpupool.server.webhook"):
            sent = [hook.send({"n": i}) for i in range(50)]
            assert sent[0] and 1 <= sum(sent) <= 2  # one posting, at most one queued
            assert any("dropped one" in r.getMessage() for r in caplog.records)
            assert hook.wait_idle(10)
        assert hook.delivered == 0 and hook.failed == sum(sent)
    finally:
        mute.close()
