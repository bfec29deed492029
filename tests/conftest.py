"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI replays the same generated examples on every run (a red CI must be reproducible, and a
# lucky draw must not decide whether work lands); developers' runs keep exploring new ones.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

CHROMIUM = os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, one per test module. Playwright's sync API
    allows one running instance per process and keeps an event loop running in this thread
    while it lives, so it must end with the module that uses it (other modules call
    `asyncio.run`)."""
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        pytest.skip(f"Chromium not found at {CHROMIUM}; scripts/test installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    # A shared 2-core CI machine can be slow to run Plotly's bundle; waits are for readiness.
    sync_api.expect.set_options(timeout=20_000)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def job_tmp() -> Iterator[Path]:
    """A temp dir jobs may write to whatever account they run as (as root, single-user jobs
    run as an unprivileged account, which cannot reach pytest's private tmp_path)."""
    d = Path(tempfile.mkdtemp(prefix="gpupool-job-", dir="/tmp"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)
