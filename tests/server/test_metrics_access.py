"""Who may read /metrics (gpupool.server.metrics_access): with a scrape token only its bearer,
from anywhere; without one only clients on the server's host. Its per-tenant series (quotas,
budgets, waiting work) are never shown to anyone else, and refusals say what to do."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from gpupool.server.metrics_access import (
    VIA_PROXY_HEADER,
    came_through_proxy,
    is_loopback,
    token_matches,
)
from gpupool.server.settings import Settings
from tests.server.conftest import METRICS_TOKEN

PER_TENANT = "gpupool_tenant_guaranteed_gpus"


def _scrape(world, client: tuple[str, int], headers: dict[str, str] | None = None):
    with TestClient(world.app, client=client) as c:
        return c.get("/metrics", headers=headers or {})


def test_with_a_token_only_its_bearer_reads_metrics_even_from_this_host(world):
    assert PER_TENANT in world.scrape()  # the conftest world has METRICS_TOKEN set
    for client in (("203.0.113.9", 1), ("127.0.0.1", 1)):
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {METRICS_TOKEN}x"},
            {"Authorization": f"Basic {METRICS_TOKEN}"},
            world.h("admin"),  # a user's API token is not the scrape token
        ):
            r = _scrape(world, client, headers)
            assert r.status_code == 401, (client, headers, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "GPUPOOL_METRICS_TOKEN" in r.json()["detail"]
            assert PER_TENANT not in r.text
        ok = _scrape(world, client, {"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert ok.status_code == 200 and PER_TENANT in ok.text


@pytest.fixture
def no_token(world):
    world.ctx.settings = dataclasses.replace(world.ctx.settings, metrics_token=None)
    return world


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_clients_on_this_host_read_metrics(no_token, host):
    r = _scrape(no_token, (host, 1))
    assert r.status_code == 200 and PER_TENANT in r.text


@pytest.mark.parametrize("host", ["203.0.113.9", "10.0.0.5", "::ffff:203.0.113.9", "testclient"])
def test_without_a_token_other_hosts_are_refused_and_told_what_to_set(no_token, host):
    r = _scrape(no_token, (host, 1), no_token.h("admin"))  # not even with an admin's token
    assert r.status_code == 403
    assert r.headers["content-type"] == "application/problem+json"
    detail = r.json()["detail"]
    assert "GPUPOOL_METRICS_TOKEN" in detail and host in detail
    assert PER_TENANT not in r.text


def test_the_token_comes_from_the_environment_and_stays_out_of_reprs():
    s = Settings.from_env({"GPUPOOL_METRICS_TOKEN": "  s3cret-scrape  "})
    assert s.metrics_token == "s3cret-scrape"
    assert "s3cret" not in repr(s)
    assert Settings.from_env({"GPUPOOL_METRICS_TOKEN": " "}).metrics_token is None
    assert Settings.from_env({}).metrics_token is None


def test_token_comparison_and_loopback():
    assert token_matches("abc", "abc")
    assert not token_matches("abc", "abd")
    assert not token_matches("ab", "abc") and not token_matches("abcd", "abc")
    assert is_loopback("127.0.0.1") and is_loopback("::1")
    # IPv4-mapped loopback (a dual-stack socket's view of 127.0.0.1): Python < 3.13 says no
    assert is_loopback("::ffff:127.0.0.1") and is_loopback("::ffff:127.8.9.10")
    assert is_loopback("::FFFF:7f00:1") and is_loopback("::ffff:127.0.0.1%eth0")
    for host in (None, "", "localhost", "testclient", "10.0.0.1", "0.0.0.0", "::"):
        assert not is_loopback(host), host
    for host in ("::ffff:10.0.0.1", "::ffff:203.0.113.9", "::127.0.0.1", "64:ff9b::7f00:1"):
        assert not is_loopback(host), host  # mapped non-loopback; compatible/NAT64 forms


# What a proxy on this host may send. It connects from 127.0.0.1, and the address uvicorn
# takes from X-Forwarded-For may be one the client wrote: none of them is a local client.
PROXY_HEADERS = [
    {"X-Forwarded-For": "203.0.113.9"},
    {"X-Forwarded-For": "127.0.0.1"},  # a local client behind it, or a remote one lying
    {"X-Forwarded-For": "127.0.0.1, 127.0.0.1"},
    {"Forwarded": "for=127.0.0.1"},
    {"X-Real-IP": "127.0.0.1"},
    {"X-Forwarded-Proto": "https"},
    {"X-Forwarded-Host": "hub.example.org"},
]


@pytest.mark.parametrize("headers", PROXY_HEADERS)
@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_without_a_token_a_request_through_a_proxy_is_never_local(no_token, host, headers):
    r = _scrape(no_token, (host, 1), headers)
    assert r.status_code == 403, (host, headers, r.text)
    assert "through a proxy" in r.json()["detail"]
    assert PER_TENANT not in r.text
    # the same proxy with the scrape token set: its bearer reads /metrics
    no_token.ctx.settings = dataclasses.replace(no_token.ctx.settings, metrics_token="t0k")
    ok = _scrape(no_token, (host, 1), headers | {"Authorization": "Bearer t0k"})
    assert ok.status_code == 200 and PER_TENANT in ok.text


def test_which_headers_say_a_request_came_through_a_proxy():
    for headers in PROXY_HEADERS:
        assert came_through_proxy(k.lower() for k in headers), headers
    assert came_through_proxy(["x-forwarded-port"]) and came_through_proxy(["x-forwarded-prefix"])
    assert not came_through_proxy(["host", "authorization", "user-agent", "x-forwarded"])
    # from an API worker, its own X-Forwarded-For/-Proto say nothing: its mark says it
    worker = ["host", "x-forwarded-for", "x-forwarded-proto"]
    assert not came_through_proxy(worker, from_worker=True)
    assert came_through_proxy([*worker, VIA_PROXY_HEADER], from_worker=True)
    assert came_through_proxy([*worker, "forwarded"], from_worker=True)  # passed on as sent
    assert came_through_proxy([*worker, "x-forwarded-host"], from_worker=True)
    assert came_through_proxy(worker)  # over TCP those two are a proxy's
