"""/metrics behind JupyterHub's configurable-http-proxy, for real: uvicorn (proxy headers on,
as `gpupool up` runs it) behind the proxy at /services/gpupool/. The proxy connects from
127.0.0.1 and adds X-Forwarded-For, so a scrape through it is never taken for a local
client without the scrape token, whatever the client wrote in X-Forwarded-For and whatever
FORWARDED_ALLOW_IPS says (gpupool.server.metrics_access)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from gpupool.web import ServePrefix
from tests.server.test_prometheus import Cluster
from tests.support import ServedApp, end_process, free_port, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("configurable-http-proxy") is None,
        reason="configurable-http-proxy is not installed (scripts/services.sh)",
    ),
]

PER_TENANT = "gpupool_tenant_guaranteed_gpus"
METRICS = "/services/gpupool/metrics"


def _outward_address() -> str | None:
    """This host's address other than loopback (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") else ip


@dataclass
class Proxied:
    cluster: Cluster
    direct: str  # the gpupool server itself, on 127.0.0.1
    proxy: str  # configurable-http-proxy in front of it, on every address of this host
    outward: str | None  # an address of this host other than loopback, to come from


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.TransportError:
        return False


@contextmanager
def serving(tmp_path, metrics_token: str | None) -> Iterator[Proxied]:
    cluster = Cluster(tmp_path, metrics_token=metrics_token)
    port, api_port = free_port(), free_port()
    with ServedApp(ServePrefix(cluster.app)) as direct:
        env = os.environ | {"CONFIGPROXY_AUTH_TOKEN": "test-proxy-api-token"}
        chp = subprocess.Popen(
            [
                *("configurable-http-proxy", "--ip", "0.0.0.0", "--port", str(port)),
                *("--api-ip", "127.0.0.1", "--api-port", str(api_port)),
                *("--default-target", direct, "--log-level", "warn"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proxy = f"http://127.0.0.1:{port}"
            wait_for(lambda: _answers(f"{proxy}/services/gpupool/healthz"), "the proxy", 30)
            yield Proxied(cluster, direct, proxy, _outward_address())
        finally:
            end_process(chp)
    cluster.store.close()


@pytest.fixture
def proxied(tmp_path) -> Iterator[Proxied]:
    with serving(tmp_path, None) as p:
        yield p


def _get(base: str, headers: dict[str, str] | None = None, local: str | None = None):
    transport = httpx.HTTPTransport(local_address=local) if local else None
    with httpx.Client(transport=transport, timeout=10) as c:
        return c.get(f"{base}{METRICS}", headers=headers or {})


def test_a_scrape_through_the_proxy_is_not_local(proxied):
    # straight to the server from this host: local
    r = _get(proxied.direct)
    assert r.status_code == 200 and PER_TENANT in r.text
    # through the proxy from this host: the proxy connects from 127.0.0.1 and names
    # 127.0.0.1 in X-Forwarded-For, which a remote client could have written: refused
    for headers in ({}, {"X-Forwarded-For": "127.0.0.1"}):
        r = _get(proxied.proxy, headers)
        assert r.status_code == 403, (headers, r.text)
        assert "through a proxy" in r.json()["detail"] and PER_TENANT not in r.text


def test_a_remote_client_cannot_pass_for_a_local_one_through_the_proxy(tmp_path, monkeypatch):
    """With FORWARDED_ALLOW_IPS=* uvicorn takes the leftmost X-Forwarded-For entry, which the
    client writes: /metrics still refuses it.

    Of the six cases only one tests the proxy rule (`came_through_proxy`): `*` with a
    client-written `X-Forwarded-For: 127.0.0.1`, where uvicorn settles on 127.0.0.1. In the
    other five uvicorn itself takes the outward address (from the proxy's X-Forwarded-For
    entry with 127.0.0.1 trusted; it ignores `Forwarded`), refused as remote even without
    the rule; they stay to show no header gets a remote client in."""
    if _outward_address() is None:
        pytest.skip("this host has no address other than loopback to come from (all cases)")
    for trusted in ("127.0.0.1", "*"):
        monkeypatch.setenv("FORWARDED_ALLOW_IPS", trusted)
        with serving(tmp_path / trusted.replace("*", "all"), None) as p:
            assert p.outward is not None
            proxy = p.proxy.replace("127.0.0.1", p.outward)
            for headers in ({}, {"X-Forwarded-For": "127.0.0.1"}, {"Forwarded": "for=::1"}):
                r = _get(proxy, headers, local=p.outward)
                assert r.status_code == 403, (trusted, headers, r.text)
                assert PER_TENANT not in r.text


def test_the_scrape_token_opens_metrics_through_the_proxy(tmp_path):
    with serving(tmp_path, "scrape-s3cret") as p:
        assert _get(p.proxy).status_code == 401
        r = _get(p.proxy, {"Authorization": "Bearer scrape-s3cret"})
        assert r.status_code == 200 and PER_TENANT in r.text
