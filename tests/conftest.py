"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright, one per test run (Playwright's sync API allows
    one running instance per process, so every browser test shares it)."""
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        pytest.skip(f"Chromium not found at {CHROMIUM}; scripts/test installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    # A shared 2-core CI machine can be slow to run Plotly's bundle; waits are for readiness.
    sync_api.expect.set_options(timeout=20_000)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
