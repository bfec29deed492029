"""The README's "Everyday use" commands, run for real as written against a `gpupool up` on
simulated GPUs (issue 30, item 1): each must succeed as the admin the README logs in as.

Only the server's address is the test's own (a free port, not 8080). Skipped, and why: the
multi-node line (its comment says it is for the Slurm and Kubernetes engines) and the full
Philly trace replay (over 5 minutes on 2 cores; tests/sim replays traces). Their syntax is
checked with every other documented command in test_docs_commands."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from tests.cli.test_docs_commands import _commands, _tokens
from tests.cli.test_up import PASSWORD, Up
from tests.support import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SKIPPED = ("(Slurm, Kubernetes)", "--trace ")


def everyday_commands() -> list[list[str]]:
    """The gpupool commands of the README's "Everyday use" block, in order."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Everyday use", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    out = []
    for line in block.splitlines():
        if any(s in line for s in SKIPPED):
            continue
        out += _commands(_tokens(line))
    return out


def test_the_readme_has_everyday_commands():
    got = everyday_commands()
    assert got[0][:1] == ["login"] and ["top"] in got and len(got) >= 8
    assert any(c[:1] == ["run"] and "python3" in c for c in got)


def test_the_readmes_everyday_commands_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples/two-labs.yaml is relative to the checkout
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for var in ("GPUPOOL_TOKEN", "GPUPOOL_URL"):
        monkeypatch.delenv(var, raising=False)
    up = Up(tmp_path / "data", free_port(), "--simulate", "4xH100-80GB")
    try:
        up.wait_ready()
        for args in everyday_commands():
            args = [re.sub(r"^http://127\.0\.0\.1:8080$", up.url, a) for a in args]
            args = [a.replace("$(hostname)", socket.gethostname()) for a in args]  # the shell's
            r = CliRunner().invoke(app, args, input=f"{PASSWORD}\n")
            said = f"gpupool {' '.join(args)} ->\n{r.output}\n--- server:\n{up.output[-3000:]}"
            assert r.exit_code == 0, said
            if args[:2] == ["run", "--gpus"]:  # the job ran and saw its GPU
                assert re.search(r"GPU-[0-9a-f-]+", r.output), said
    finally:
        up.stop()
