"""docs/python.md's examples, run as written, in order, against a real `gpupool up` on
simulated GPUs (4 x H100), logged in as its first admin the way a researcher is: the token
`gpupool login` would save, in the config file the client reads."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from gpupool.client import Client, save_config
from tests.cli.test_up import PASSWORD, Up
from tests.support import free_port

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"

#: section heading -> what its example must print (regular expressions, each on the output)
EXPECT = {
    "Connect": [r"^gpupool \d+\.\d+\.\d+ as admin$"],
    "Submit a training run from a script and wait for it": [
        r"^submitted w-\S+ - 1 GPU",
        r"^w-\S+ succeeded exit code 0$",
        r"^epoch 2: loss 0.57$",
    ],
    "Submit a sweep of 20 fractional jobs": [r"^20 of 20 succeeded$", r"^best: sweep-lr0.221684$"],
    "Stream a job's logs": [r"^step 0\nstep 1\nstep 2\nended: succeeded$"],
    "Ask why a job waits, and when it is expected to start": [
        r"^pending - .+",
        r"^expected to start by \d{4}-\d\d-\d\dT",
        r"^#1 w-\S+ admin: .+",
    ],
    "Read my usage this month": [r"^admin: \d+\.\d{3} GPU-hours allocated since \d{4}-\d\d-01$"],
    "Errors": [
        r"^not sent: gpu_memory='lots': give a size with a unit",
        r"^refused: .*64.* \(HTTP 422\)$",
        r"^no such job: .*w-000000",
    ],
    "From asyncio": [r"^async ok$"],
}


def examples() -> list[tuple[str, str]]:
    """(section heading, code) of each python block, in order."""
    out = []
    for section in DOC.read_text().split("\n## ")[1:]:
        heading = section.split("\n", 1)[0]
        out += [(heading, code) for code in re.findall(r"```python\n(.*?)```", section, re.S)]
    return out


def test_every_example_has_its_expectations():
    assert [h for h, _ in examples()] == list(EXPECT)


def test_the_examples_run_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for var in ("GPUPOOL_TOKEN", "GPUPOOL_URL"):
        monkeypatch.delenv(var, raising=False)
    up = Up(tmp_path / "data", free_port(), "--simulate", "4xH100-80GB")
    try:
        up.wait_ready()
        with Client(up.url, "") as anon:
            token = anon.login("admin", PASSWORD, "docs").token
        save_config(up.url, token)
        with Client(up.url, token) as admin:  # `gpupool gpu set-sharing HOST:3 shared`
            (gpu,) = [g for g in admin.gpus() if g.index == 3]
            admin.request("PATCH", f"/gpus/{gpu.uuid}", json={"sharing": "shared"})
            # guaranteed GPUs: a blocked job then reserves a node and learns when it starts
            admin.request("PATCH", "/tenants/default", json={"quota": {"guaranteed": 8}})
        for heading, code in examples():
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"docs/python.md: {heading}", "exec"), {"__name__": "__main__"})
            said = f"{heading} printed:\n{printed.getvalue()}\n--- server:\n{up.output[-2000:]}"
            for pattern in EXPECT[heading]:
                assert re.search(pattern, printed.getvalue(), re.M), f"{pattern!r}\n{said}"
    finally:
        up.stop()
