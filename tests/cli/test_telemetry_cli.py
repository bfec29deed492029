"""`gpupool devices`, `gpupool top`, `gpupool exporter` on simulated GPUs (CI has no GPU)."""

from __future__ import annotations

import json
import socket
import sys
import types

import pytest
import typer
from typer.testing import CliRunner

from gpupool.cli import telemetry

runner = CliRunner()


@pytest.fixture(autouse=True)
def logged_out(tmp_path, monkeypatch):
    """Not logged in to any server: devices and top read this host (or simulated GPUs)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    for var in ("GPUPOOL_TOKEN", "GPUPOOL_URL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def app() -> typer.Typer:
    a = typer.Typer()
    telemetry.register(a)
    return a


def test_commands_are_registered_on_the_root_app():
    from gpupool.cli.main import app as root

    result = runner.invoke(root, ["--help"])
    assert result.exit_code == 0
    for cmd in ("devices", "top", "exporter"):
        assert cmd in result.output


def test_devices_json_on_simulated_gpus(app):
    result = runner.invoke(app, ["devices", "--json", "--simulate", "4xH100-80GB,2xA100-40GB"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["simulated"] is True and len(data["gpus"]) == 6
    assert data["gpus"][5]["name"] == "NVIDIA A100-SXM4-40GB"
    assert data["gpus"][0]["memory_total_bytes"] == 81559 * 2**20


def test_devices_table_says_simulated(app):
    result = runner.invoke(app, ["devices", "--simulate", "2xH100-80GB"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "SIMULATED" in result.output and "NVIDIA H100 80GB HBM3" in result.output


def test_bad_spec_is_a_clear_error_not_a_traceback(app):
    result = runner.invoke(app, ["devices", "--simulate", "3xFOO"])
    assert result.exit_code == 2
    assert "give the memory" in result.output and "Traceback" not in result.output


def test_no_gpu_suggests_simulate(app, monkeypatch):
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        value = 12

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    fake.NVMLError = NVMLError  # type: ignore[attr-defined]
    fake.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    for cmd in (["devices"], ["top", "--once"], ["exporter"]):
        result = runner.invoke(app, cmd)
        assert result.exit_code == 1, cmd
        assert "--simulate" in result.output and "Traceback" not in result.output


def test_top_once_json_for_scripts(app):
    result = runner.invoke(app, ["top", "--simulate", "2xH100-80GB", "--once", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["simulated"] is True
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    assert {"util_gpu", "memory_used_mib", "held_by", "idle", "processes"} <= set(data["gpus"][0])


def test_top_once_screen_labels_simulation(app):
    result = runner.invoke(app, ["top", "--simulate", "H100", "--once"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "SIMULATED GPUs" in result.output and "no GPU processes" in result.output


def test_top_screen_shows_owner_share_enforcement_and_flags():
    from rich.console import Console

    from gpupool.clock import ManualClock
    from gpupool.domain import Allocation, Enforcement, Share
    from gpupool.telemetry import Attribution, Policer, PolicingConfig, Sampler, SimulatedSource
    from gpupool.telemetry import Via as V

    clock = ManualClock()
    sim = SimulatedSource("2xH100-80GB", clock=clock)
    sim.add_process(0, 4242, memory_mib=30000, sm_util=0)
    share = Share("n", 0, sim.uuid(0), 500, 20000, Enforcement.POLICED)

    class Owners:
        def attribute_all(self, pids):
            return {4242: Attribution(4242, V.ENV, "w-9", "alice", "lab-a", command="train.py")}

    frame = Sampler(
        sim,
        clock=clock,
        attributor=Owners(),  # type: ignore[arg-type]
        policer=Policer(clock, PolicingConfig(idle_after_s=0)),
        allocations=lambda: [Allocation("w-9", "n", (share,), 0.0)],
    ).sample_once()
    console = Console(width=220, record=True)
    console.print(telemetry.render_top(frame))
    text = console.export_text()
    for expected in (
        "alice",
        "lab-a",
        "w-9",
        "0.5 GPU, 20000 MiB",
        "policed",
        "IDLE",
        "POLICY",
        "over_memory",
        "train.py",
    ):
        assert expected in text, expected


def test_exporter_on_a_busy_port_is_a_clear_error(app):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        result = runner.invoke(app, ["exporter", "--simulate", "H100", "--port", port])
    assert result.exit_code == 1
    assert "choose another --port" in result.output


def test_exporter_serves_metrics_until_interrupted():
    """Ctrl-C (SIGINT) stops the exporter with exit 0. The child gets SIGINT's default
    disposition explicitly: one inherited as ignored (a runner started in the background)
    would keep it running. Whatever happens, the exporter does not outlive the test."""
    import signal
    import subprocess
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    cmd = [
        sys.executable,
        "-m",
        "gpupool.cli.telemetry",
        "exporter",
        "--simulate",
        "2xA100-40GB",
        "--port",
        "0",
    ]

    def default_sigint() -> None:  # in the child, before exec: Python then maps it to Ctrl-C
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    ) as proc:
        try:
            line = (
                proc.stdout.readline()
            )  # "serving http://127.0.0.1:PORT/metrics (SIMULATED GPUs)"
            assert "SIMULATED" in line, line + proc.stderr.read()
            url = line.split()[1].rstrip(";")
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read().decode()
            names = {f.name for f in text_string_to_metric_families(body)}
            assert {"DCGM_FI_DEV_GPU_UTIL", "gpupool_gpu_info"} <= names
            proc.send_signal(signal.SIGINT)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:  # a failure above, or Ctrl-C did not stop it
                proc.kill()
                proc.wait(20)
