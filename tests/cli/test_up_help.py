"""`gpupool up --help` at 80 columns (issue 30, item 9): general options first, then one
panel per engine or part; no option name cut short; the port's real default."""

from __future__ import annotations

import os
import re
import subprocess

from tests.cli.test_up import GPUPOOL


def _help() -> str:
    env = dict(os.environ, COLUMNS="80", LINES="50", TERM="xterm")
    env.pop("NO_COLOR", None)
    r = subprocess.run(
        [*GPUPOOL, "up", "--help"], capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_up_help_fits_80_columns_without_cutting_option_names():
    out = _help()
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out, [line for line in lines if "…" in line]
    options = set(re.findall(r"(--[a-z][a-z0-9-]*)", out))
    for name in ("--engine", "--home-storage-class", "--no-block-cloud-metadata"):
        assert name in options
    assert "--slurm-notebook-command" in options and "--mps-service-account" in options
    assert len(lines) < 172  # what it was: Kubernetes' help wrapped in a narrow column


def test_up_help_puts_general_options_first_then_one_panel_per_engine():
    out = _help()
    panels = re.findall(r"╭─ (.+?) ─", out)
    assert panels == [
        "Options",
        "JupyterHub",
        "Local engine (--engine local)",
        "Kubernetes engine (--engine kubernetes)",
        "Slurm engine (--engine slurm)",
    ]
    at = {name: out.index(f"│ {name} ") for name in ("--engine", "--port", "--kubeconfig")}
    assert at["--engine"] < at["--port"] < out.index("╭─ JupyterHub") < at["--kubeconfig"]


def test_up_help_says_the_ports_real_default():
    out = _help()
    port = out[out.index("│ --port ") : out.index("│ --user-mode ")]
    text = " ".join(part.strip(" │") for part in port.splitlines())
    assert "8080 when JupyterHub runs on port 8000" in " ".join(text.split())
    assert "[default: 8000]" not in text
