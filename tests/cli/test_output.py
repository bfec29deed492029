"""What `queue`, `show` and `ls --all` print at an 80-column terminal, against a real server
with its scheduler running: a fraction's ask in a short form that stays on one line, a
reason with room, no line of `show` over 80 columns, and whose work it is in `ls --all`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpupool.cli import client
from gpupool.cli.client import asks_text
from gpupool.cli.main import app as cli
from tests.cli.test_client import as_, env, server  # noqa: F401 - fixtures
from tests.support import wait_for

LONG = ["python3", "train.py", "--config", "configs/very/long/path/to/a/config.yaml"] + [
    f"--option-{i}=value-{i}" for i in range(12)
]


def gp(*args: str, token: str) -> str:
    r = CliRunner().invoke(cli, list(args), env={"GPUPOOL_TOKEN": token, "COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture
def waiting(env, monkeypatch):  # noqa: F811
    """ann runs 3 whole GPUs (lab's limit is 3) and submits a quarter GPU, which waits."""
    monkeypatch.setattr(client.out, "width", 80)
    _, ctx = env
    t = as_(ctx, "ann")
    big = gp("run", "--gpus", "3", "--", "python3", "train.py", token=t).strip()
    small = gp(
        "run",
        "--gpu-fraction",
        "0.25",
        "--gpu-memory",
        "20G",
        "--name",
        "sweep",
        "--",
        *LONG,
        token=t,
    ).strip()

    def small_waits() -> bool:
        q = json.loads(gp("queue", "--json", token=t))
        return bool(q) and q[0]["workload"]["id"] == small and "limit" in q[0]["reason"]

    wait_for(small_waits, f"{small} waiting on lab's limit", timeout=30, every=0.05)
    return t, big, small


def _fits(text: str) -> None:
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80, text


def test_queue_shows_a_fractions_ask_whole_and_gives_the_reason_room(waiting):
    t, _, small = waiting
    text = gp("queue", token=t)
    _fits(text)
    row = next(line for line in text.splitlines() if small in line)
    assert "0.25 GPU, 20G" in row  # on its own line, not wrapped
    reason = json.loads(gp("queue", "--json", token=t))[0]["reason"]
    why_col = text.splitlines()[0].index("WHY IT WAITS")
    assert why_col <= 40, text  # the reason has at least half the line
    said = " ".join(line[why_col:].strip() for line in text.splitlines()[1:])
    assert " ".join(said.split()) == reason


def test_show_fits_80_columns_and_wraps_long_values_under_themselves(waiting):
    t, big, small = waiting
    for wid in (small, big):
        text = gp("show", wid, token=t)
        _fits(text)
        w = json.loads(gp("show", wid, "--json", token=t))
        flat = " ".join(text.split())
        for value in (" ".join(w["command"]), w["request"]["description"]):
            assert value in flat
        if w.get("pending"):
            assert w["pending"]["reason"] in flat
        for e in w["events"]:
            assert e["message"] in flat
    lines = gp("show", small, token=t).splitlines()
    command = next(i for i, line in enumerate(lines) if line.startswith("  command "))
    value_col = lines[command].index("python3")
    assert lines[command + 1].startswith(" " * value_col)  # the rest of it, under itself


def test_ls_all_names_whose_work_it_is(waiting):
    t, big, small = waiting
    text = gp("ls", "--all", token=t)
    _fits(text)
    assert text.splitlines()[0].split() == ["ID", "USER", "STATE", "ASKS", "GPUS", "AGE"]
    for wid in (big, small):
        row = next(line for line in text.splitlines() if wid in line)
        assert row.split()[1] == "ann"
    assert "USER" not in gp("ls", token=t).splitlines()[0]  # your own: no need


@pytest.mark.parametrize(
    "request_,short",
    [
        ({"gpus": 1}, "1 GPU"),
        ({"gpus": 4, "gpu_model": "H100"}, "4 H100 GPUs"),
        ({"gpus": 0, "gpu_fraction": 0.25, "gpu_memory_mib": 20480}, "0.25 GPU, 20G"),
        ({"gpus": 0, "gpu_fraction": 0.5, "gpu_memory_mib": 0}, "0.5 GPU"),
        ({"gpus": 16, "nodes": 2, "gpus_per_node": 8}, "2x8 GPUs"),
        ({"gpus": 0, "mig": "1g.10gb"}, "MIG 1g.10gb"),
        ({"gpus": 0}, "CPU only"),
    ],
)
def test_asks_in_a_few_columns(request_, short):
    assert asks_text(request_) == short
