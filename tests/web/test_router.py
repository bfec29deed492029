"""The dashboard router without a browser: page shells, static files, the chart library."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpupool.web import PAGES, create_router
from gpupool.web.router import plotly_bundle


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    app.include_router(create_router())
    return TestClient(app)


@pytest.mark.parametrize("slug", [p.slug for p in PAGES])
def test_each_page_is_a_shell_with_strict_csp(client, slug):
    r = client.get(f"/dashboard/{slug}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp
    html = r.text
    assert 'aria-current="page"' in html and 'class="skip"' in html
    assert "<script>" not in html  # no inline scripts: the CSP would block them
    for src in re.findall(r'<script src="([^"]+)"', html):
        assert client.get(src).status_code == 200, src


def test_login_page_and_redirects(client):
    assert client.get("/dashboard/login").status_code == 200
    for path in ("/", "/dashboard", "/dashboard/"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == "/dashboard/cluster"


def test_unknown_page_says_what_exists(client):
    r = client.get("/dashboard/nope")
    assert r.status_code == 404
    assert "no dashboard page called" in r.text and "Cluster" in r.text


def test_static_files_are_cached_and_unknown_ones_refused(client):
    r = client.get("/dashboard/static/common.js")
    assert r.status_code == 200 and "max-age" in r.headers["cache-control"]
    assert client.get("/dashboard/static/..%2Frouter.py").status_code == 404
    assert client.get("/dashboard/static/nothing.js").status_code == 404


def test_chart_library_comes_from_the_installed_plotly_package(client):
    r = client.get("/dashboard/vendor/plotly.min.js")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/javascript")
    assert r.content == plotly_bundle().read_bytes()
    assert "site-packages" in str(plotly_bundle()) or "dist-packages" in str(plotly_bundle())


def test_pages_work_behind_jupyterhubs_service_prefix():
    from gpupool.web import HUB_SERVICE_PREFIX, ServePrefix

    app = FastAPI()
    app.include_router(create_router())

    @app.get("/api/v1/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    app.add_middleware(ServePrefix)
    c = TestClient(app)
    pre = HUB_SERVICE_PREFIX
    r = c.get(f"{pre}/dashboard/queue")
    assert r.status_code == 200
    assert f'data-api="{pre}/api/v1"' in r.text and f'data-base="{pre}/dashboard"' in r.text
    scripts = re.findall(r'<script src="([^"]+)"', r.text)
    assert scripts and all(s.startswith(f"{pre}/dashboard/static/") for s in scripts)
    for src in scripts:
        assert c.get(src).status_code == 200
    assert f'href="{pre}/dashboard/usage"' in r.text
    r = c.get(f"{pre}/dashboard", follow_redirects=False)
    assert r.headers["location"] == f"{pre}/dashboard/cluster"
    assert c.get(f"{pre}/api/v1/ping").json() == {"pong": "yes"}
    # Without the prefix nothing changes.
    r = c.get("/dashboard/queue")
    assert 'data-api="/api/v1"' in r.text
    assert c.get("/dashboard", follow_redirects=False).headers["location"] == "/dashboard/cluster"
