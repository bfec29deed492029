"""Listing tables at 80 columns: the default columns fit and no cell is cut ("succee…"),
`-o wide` adds the other columns, `--json`/`-o json` print the API's answer.

Each listing runs through the CLI against a real server (seeded: running, pending and
finished work of three tenants, simulated GPUs with 40-character UUIDs) on an 80-column
console; its cells are computed from the same API answer and must appear whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpupool.cli import client, client_admin, cluster_view, tables
from gpupool.cli.main import app as cli
from gpupool.cli.tables import Col, Output

#: Columns whose value moves with the clock between the JSON call and the table call.
MOVING = {"AGE", "HEARTBEAT"}


@pytest.fixture
def narrow(monkeypatch):
    """The CLI's console is 80 columns wide (a terminal's default; also what a pipe gets)."""
    monkeypatch.setattr(client.out, "width", 80)


def gp(*args: str):
    r = CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    return r.output


def assert_whole(text: str, cols: tuple[Col, ...], items: list, *, wide: bool) -> None:
    """Every shown column's header is there; each cell is printed whole (wrapping columns:
    each word whole); nothing is ellipsized; default tables fit 80 columns."""
    assert "…" not in text
    lines = text.splitlines()
    header = next(line for line in lines if line.split() and line.split()[0] == cols[0].header)
    for c in cols:
        if c.wide and not wide:
            assert f" {c.header} " not in f" {header} ", f"{c.header} is a -o wide column"
            continue
        if c.sparse and all(tables.cell(c.get(item)) == "-" for item in items):
            assert f" {c.header} " not in f" {header} ", f"{c.header} is empty: left out"
            continue
        assert c.header in header, c.header
        if c.header in MOVING:
            continue
        for item in items:
            value = tables.cell(c.get(item))
            for part in value.split() if c.wrap else [value]:
                assert any(part in line for line in lines), (c.header, part, text)
    if not wide:
        assert max(len(line.rstrip()) for line in lines) <= 80, text


LISTINGS = [
    (["ls", "-a"], client.LS_ALL_COLUMNS, lambda d: d),
    (["queue"], client.QUEUE_COLUMNS, lambda d: d),
    (["usage"], client.usage_columns("tenant"), lambda d: d["rows"]),
    (["tenant", "ls"], client_admin.TENANT_COLUMNS, lambda d: d),
    (["user", "ls"], client_admin.USER_COLUMNS, lambda d: d),
    (["gpu", "ls"], client_admin.GPU_COLUMNS, lambda d: d),
    (["node", "ls"], client_admin.NODE_COLUMNS, lambda d: d),
    (["profile", "ls"], client_admin.PROFILE_COLUMNS, lambda d: d),
    (["devices"], cluster_view.DEVICE_COLUMNS, cluster_view._gpus),
]


@pytest.mark.parametrize("args,cols,items_of", LISTINGS, ids=[" ".join(a) for a, _, _ in LISTINGS])
def test_listing_fits_80_columns_and_wide_shows_the_rest(login, narrow, args, cols, items_of):
    login("root")
    data = json.loads(gp(*args, "--json"))
    assert json.loads(gp(*args, "-o", "json")) == data or args == ["devices"]
    items = items_of(data)
    assert items, f"the seed gives {args} something to list"
    assert_whole(gp(*args), cols, items, wide=False)
    assert_whole(gp(*args, "-o", "wide"), cols, items, wide=True)


def test_ls_default_columns_are_id_state_asks_gpus_age(login, narrow):
    login("root")
    header = gp("ls", "-a").splitlines()[0].split()
    assert header == ["ID", "USER", "STATE", "ASKS", "GPUS", "AGE"]  # --all: USER too
    out = gp("ls", "-a")
    for state in ("succeeded", "cancelled", "pending", "running"):
        assert state in out
    wide = gp("ls", "-a", "-o", "wide").splitlines()[0].split()
    assert {"NAME", "USER", "TENANT", "KIND", "SUBMITTED"} <= set(wide)


def test_top_fits_80_columns(login):
    login("ann")
    text = gp("top", "--once")
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text


def test_top_piped_prints_one_screen_and_exits(login):
    """`gpupool top | less`: not on a terminal, a live screen would print nothing (it redraws
    in place); it prints one plain screen instead, as `--once` does, within 80 columns."""
    login("ann")
    cmd = [sys.executable, "-c", "from gpupool.cli.main import run; run()", "top"]
    env = os.environ | {"COLUMNS": "80"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "GPUs of http://" in text and "WORKLOAD" in text, text
    assert "\x1b" not in text  # plain text: no cursor movement, no colours
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text


def _render(cols, items, width: int, output: Output = Output.TABLE) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    tables.show(console, cols, items, output)
    return console.export_text()


def test_a_table_too_wide_for_the_terminal_is_printed_wider_not_cut():
    cols = (
        Col("ID", lambda x: x[0]),
        Col("STATE", lambda x: x[1]),
        Col("WHY", lambda x: x[2], wrap=True),
    )
    items = [("w-" + "x" * 40, "succeeded", "a reason " * 10), ("w-1", "preempted", "short")]
    text = _render(cols, items, width=40)
    assert_whole(text, cols, items, wide=True)
    assert max(len(line) for line in text.splitlines()) > 40


def test_wide_columns_only_with_wide():
    cols = (Col("ID", lambda x: x), Col("EXTRA", lambda x: "more", wide=True))
    assert "EXTRA" not in _render(cols, ["w-1"], 80)
    assert "EXTRA" in _render(cols, ["w-1"], 80, Output.WIDE)


@pytest.mark.parametrize(
    "t,now,expected",
    [(100.0, 145.0, "45s"), (0.0, 3 * 60 + 5, "3m"), (0.0, 7200.0, "2h"), (0.0, 86400 * 5.5, "5d")],
)
def test_age(t, now, expected):
    assert tables.age(t, now) == expected
    assert tables.age(None, now) == "-"


def test_gpu_list_joins_runs_per_node():
    shares = [("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3), ("n2", 5), ("n2", 1)]
    assert tables.gpu_list(shares) == "n1:0-3 n2:1,5"
    assert tables.gpu_list([("n1", 0), ("n1", 2), ("n1", 3)]) == "n1:0,2-3"


def test_usage_marks_estimated_busy_time_apart_from_measured():
    cols = {c.header: c.get for c in client.usage_columns("tenant")}
    row = {"gpu_hours_busy": 0.6, "efficiency": 0.6, "gpu_seconds_measured": 3600.0}
    assert (cols["GPU-H BUSY"](row), cols["EFFICIENCY"](row)) == ("0.60", "60%")
    est = row | {"gpu_seconds_measured": 0.0, "gpu_seconds_estimated": 3600.0}
    assert (cols["GPU-H BUSY"](est), cols["EFFICIENCY"](est)) == ("~0.60", "~60%")
    none = row | {"gpu_seconds_measured": 0.0, "efficiency": None}
    assert (cols["GPU-H BUSY"](none), cols["EFFICIENCY"](none)) == ("-", "-")
