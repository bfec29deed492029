"""`gpupool devices` and `gpupool top` on a laptop: no NVML here, logged in to a real server
(uvicorn on loopback, seeded store, the server's own simulated telemetry), they show the
server's GPUs through its API; `--local` reads this host; logged out they say what to do."""

from __future__ import annotations

import json
import sys
import types

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app as cli

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_nvml(monkeypatch):
    """This host has no GPU driver: pynvml loads but NVML's library is not there."""
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        value = 12

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake.NVMLError = NVMLError  # type: ignore[attr-defined]
    fake.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def gp(*args: str):
    return runner.invoke(cli, list(args), env={"COLUMNS": "80"})


def _holders(view):
    return {h["workload"] for n in view["nodes"] for g in n["gpus"] for h in g["holders"]}


def test_devices_shows_the_servers_gpus_through_the_api(logged_in):
    url, _ = logged_in
    r = gp("devices", "--json")
    assert r.exit_code == 0, r.output
    view = json.loads(r.output)
    gpus = [g for n in view["nodes"] for g in n["gpus"]]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert all(g["util"] is not None for g in gpus)  # the server's telemetry, not this host's
    held = _holders(view)
    assert held, "the seed runs work on the server's GPUs"
    r = gp("devices")
    assert r.exit_code == 0, r.output
    assert f"GPUs of {url}" in r.output and "SIMULATED" in r.output
    for i in range(4):
        assert f"sim-0:{i}" in r.output
    assert "…" not in r.output
    assert all(w in r.output for w in held)
    assert "UUID" not in r.output
    r = gp("devices", "-o", "wide")
    assert "UUID" in r.output and gpus[0]["uuid"] in r.output


def test_top_once_shows_the_servers_gpus_and_holders(logged_in):
    url, _ = logged_in
    view = json.loads(gp("top", "--once", "--json").output)
    assert len(view["nodes"][0]["gpus"]) == 4
    r = gp("top", "--once")
    assert r.exit_code == 0, r.output
    assert f"GPUs of {url}" in r.output
    for col in ("GPU", "MODEL", "MEMORY", "UTIL", "STATUS", "WORKLOAD", "USER", "ENFORCEMENT"):
        assert col in r.output, col
    assert all(w in r.output for w in _holders(view))
    assert "…" not in r.output
    assert max(len(line.rstrip()) for line in r.output.splitlines()) <= 80


def test_local_and_simulate_read_this_host_even_when_logged_in(logged_in):
    r = gp("devices", "--local")
    assert r.exit_code == 1
    assert "--simulate" in r.output and "gpupool login" not in r.output
    r = gp("top", "--once", "--local")
    assert r.exit_code == 1 and "NVML" in r.output
    r = gp("devices", "--simulate", "2xA100-40GB", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["simulated"] is True


def test_logged_out_without_a_gpu_says_to_log_in_or_simulate(logged_out):
    for cmd in (["devices"], ["top", "--once"], ["devices", "--json"]):
        r = gp(*cmd)
        assert r.exit_code == 1, cmd
        out = " ".join(r.output.split())
        assert "not logged in" in out and "gpupool login" in out, out
        assert "--simulate" in out and "--local" in out
        assert "Traceback" not in r.output


def test_logged_in_to_a_server_that_is_down_says_so(logged_out, monkeypatch):
    monkeypatch.setenv("GPUPOOL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GPUPOOL_TOKEN", "gp_whatever")
    r = gp("top", "--once")
    assert r.exit_code == 1
    out = " ".join(r.output.split())
    assert "cannot reach" in out and "--local" in out and "Traceback" not in out
