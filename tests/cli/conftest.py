"""Fixtures for CLI tests against a real server: uvicorn on loopback serving a seeded store
(tenants, users, running/pending/finished workloads) with simulated telemetry."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app as cli
from tests.support import ServedApp
from tests.web.seed import PASSWORD


@pytest.fixture
def logged_out(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for var in ("GPUPOOL_TOKEN", "GPUPOOL_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tests.web.conftest import build_app

    db = tmp_path_factory.mktemp("cluster-cli") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=9, history_s=60)
    with ServedApp(app) as url:
        yield url, seeded


@pytest.fixture
def login(served, logged_out):
    """Log in to the served server as a seeded user (saved login, as `gpupool login` does)."""
    url, seeded = served

    def as_(user: str):
        r = CliRunner().invoke(
            cli, ["login", "--url", url, "--user", user, "--password-stdin"], input=PASSWORD + "\n"
        )
        assert r.exit_code == 0, r.output
        return url, seeded

    return as_


@pytest.fixture
def logged_in(login):
    return login("ann")
