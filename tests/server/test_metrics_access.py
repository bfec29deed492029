"""Who may read /metrics (gpupool.server.metrics_access): with a scrape token only its bearer,
from anywhere; without one only clients on the server's host. Its per-tenant series (quotas,
budgets, waiting work) are never shown to anyone else, and refusals say what to do."""

from __future__ import annotations

import dataclasses

import pytest
from fastapi.testclient import TestClient

from gpupool.server.metrics_access import is_loopback, token_matches
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


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1"])
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
    for host in (None, "", "localhost", "testclient", "10.0.0.1", "0.0.0.0", "::"):
        assert not is_loopback(host), host
