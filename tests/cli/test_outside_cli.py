"""GPUs used outside gpupool in the CLI, against a real server: `gpupool node ls` names the
holder and does not count the GPU as free; `gpupool gpu ls`, `devices` and `top` show it as
outside with its holder; tables fit 80 columns; `--json` carries the API's `outside`."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app as cli
from gpupool.domain import OutsideUse
from gpupool.store import AllocationRepo, NodeRepo
from tests.support import ServedApp
from tests.web.seed import PASSWORD

runner = CliRunner()
SLURM = OutsideUse("slurm job 4711", "bob", since=time.time() - 3 * 3600)


@pytest.fixture(scope="module")
def served_outside(tmp_path_factory):
    from tests.web.conftest import build_app

    db = tmp_path_factory.mktemp("cli-outside") / "gpupool.db"
    app, _ = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=3, history_s=60)
    with app.state.ctx.store.write() as s:
        held = {sh.gpu_uuid for a in AllocationRepo(s).active() for sh in a.shares}
        (node,) = NodeRepo(s).list()
        free = [g for g in node.gpus if g.uuid not in held][:2]
        gpus = tuple(dataclasses.replace(g, outside=SLURM) if g in free else g for g in node.gpus)
        NodeRepo(s).upsert(dataclasses.replace(node, gpus=gpus))
    with ServedApp(app) as url:
        yield url, node.name, [g.index for g in free], len(held)


@pytest.fixture
def root(served_outside, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for var in ("GPUPOOL_TOKEN", "GPUPOOL_URL"):
        monkeypatch.delenv(var, raising=False)
    url = served_outside[0]
    r = runner.invoke(
        cli, ["login", "--url", url, "--user", "root", "--password-stdin"], input=PASSWORD + "\n"
    )
    assert r.exit_code == 0, r.output
    return served_outside


def gp(*args: str) -> str:
    r = runner.invoke(cli, list(args), env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    return r.output


def _fits(text: str) -> None:
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text


def test_node_ls_names_the_holder_and_does_not_count_it_free(root):
    _, node, outside, held = root
    (n,) = json.loads(gp("node", "ls", "--json"))
    got = [g["outside"] for g in n["gpus"] if g["outside"]]
    assert [g["index"] for g in n["gpus"] if g["outside"]] == outside
    assert {(o["ref"], o["user"]) for o in got} == {("slurm job 4711", "bob")}
    text = gp("node", "ls")
    _fits(text)
    assert "OUTSIDE" in text and "slurm job 4711 (bob) x2" in " ".join(text.split())
    free = 4 - held - len(outside)
    assert f"{free}/4" in text


def test_gpu_ls_devices_and_top_show_the_outside_holder(root):
    _, node, outside, _ = root
    text = gp("gpu", "ls")
    _fits(text)
    assert "outside gpupool: slurm job 4711 (bob)" in " ".join(text.split())
    view = json.loads(gp("devices", "--json"))
    statuses = {g["index"]: g["status"] for n in view["nodes"] for g in n["gpus"]}
    assert [i for i, s in statuses.items() if s == "outside"] == outside
    assert view["summary"]["outside"] == 2
    text = gp("devices")
    _fits(text)
    assert "0 down, 2 outside" in " ".join(text.split())
    assert "outside: slurm job 4711 (bob)" in " ".join(text.split())
    top = gp("top", "--once")
    _fits(top)
    assert "USED OUTSIDE GPUPOOL BY" in top
    rows = [line for line in top.splitlines() if "slurm job 4711" in line]
    assert [r.split()[0] for r in rows] == [f"{node}:{i}" for i in outside]
    assert all("bob" in r and "3h" in r for r in rows), top
