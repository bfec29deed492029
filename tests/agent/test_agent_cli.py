"""`gpupool agent` refuses bad command lines with exit code 2 and what to do."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app

CLEAN = {"GPUPOOL_URL": None, "GPUPOOL_NODE_TOKEN": None}


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["agent", "--simulate", "1xH100"], {}, "pass --url"),
        (["agent", "--url", "http://x", "--simulate", "1xH100"], {}, "GPUPOOL_NODE_TOKEN"),
        (
            ["agent", "--url", "http://x", "--token-file", "/nonexistent/token"],
            {},
            "cannot read --token-file",
        ),
        (
            ["agent", "--url", "http://x", "--simulate", "9xNOPE"],
            {"GPUPOOL_NODE_TOKEN": "gpn_x"},
            "bad --simulate entry",
        ),
    ],
)
def test_bad_command_lines(args, env, says):
    r = CliRunner().invoke(app, args, env={**CLEAN, **env})
    assert r.exit_code == 2, r.output
    assert says in r.output


def test_interval_out_of_range():
    r = CliRunner().invoke(app, ["agent", "--interval", "0.01"], env=CLEAN)
    assert r.exit_code == 2 and "--interval" in r.output
