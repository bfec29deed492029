"""The hub keeper of `gpupool up`: busy ports refused before the hub starts, an exited hub
reported with the end of its log and restarted, a hub that keeps exiting given up on loudly.

The "hub" here is a small real process; `check()` is called directly (no watch thread), and
the restart budget runs on an injected clock."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpupool.server.hub.config import HubSettings, HubSetupError
from gpupool.server.hub.keeper import check_ports, keep_hub, log_tail
from gpupool.supervise import RestartBudget
from tests.support import free_hub_port, wait_for


def settings(tmp_path: Path, port: int) -> HubSettings:
    return HubSettings(
        data_dir=tmp_path / "hub",
        port=port,
        proxy_api_port=port + 1,
        hub_port=port + 81,
    )


@pytest.mark.parametrize(
    "offset,named",
    [(0, "JupyterHub's public port"), (1, "the proxy's API"), (81, "the hub's API")],
)
def test_check_ports_names_the_port_another_program_holds(tmp_path, offset, named):
    port = free_hub_port()
    s = settings(tmp_path, port)
    check_ports(s)  # all free: no complaint
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port + offset))
        holder.listen()
        with pytest.raises(HubSetupError) as e:
            check_ports(s)
    message = str(e.value)
    assert f"{port + offset} ({named})" in message
    assert "--hub-port" in message and "--no-jupyterhub" in message


def test_check_ports_leaves_a_running_proxy_of_an_earlier_hub_to_jupyterhub(tmp_path):
    """After kill -9 of gpupool up the old proxy still holds P and P+1; JupyterHub takes it
    over through its pid file, so those ports are not refused."""
    port = free_hub_port()
    s = settings(tmp_path, port)
    s.data_dir.mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    proxy = bin_dir / "configurable-http-proxy"  # a stand-in with the proxy's name
    proxy.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    proxy.chmod(0o755)
    child = subprocess.Popen([str(proxy)])
    try:
        (s.data_dir / "proxy.pid").write_text(str(child.pid))
        assert "configurable-http-proxy" in " ".join(psutil.Process(child.pid).cmdline())
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", port + 1))
            holder.listen()
            check_ports(s)  # the proxy port belongs to the old proxy
            with socket.socket() as hub_api:
                hub_api.bind(("127.0.0.1", port + 81))
                hub_api.listen()
                with pytest.raises(HubSetupError, match=str(port + 81)):
                    check_ports(s)  # the hub's own API port is never the proxy's
    finally:
        child.kill()
        child.wait()


class Hub:
    """A stand-in hub: each start runs `code` in Python with its output in the log."""

    def __init__(self, tmp_path: Path, code: str):
        self.log = tmp_path / "jupyterhub.log"
        self.code = code
        self.starts = 0

    def __call__(self) -> subprocess.Popen:
        self.starts += 1
        with open(self.log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-c", self.code],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def test_an_exited_hub_is_reported_with_its_log_and_restarted(tmp_path):
    hub = Hub(tmp_path, "print('proxy failed to bind'); raise SystemExit(3)")
    said: list[str] = []
    keeper = keep_hub(hub, hub.log, said.append)
    keeper.start(watch=False)
    first = keeper.procs[1]
    keeper.check()  # still running (or not yet seen to end): nothing to say
    first.wait()
    keeper.check()
    assert hub.starts == 2 and keeper.procs[1] is not first
    (message,) = said
    assert "JupyterHub exited with code 3" in message
    assert "proxy failed to bind" in message and "restarting JupyterHub" in message
    keeper.procs[1].wait()
    keeper.stop()


def test_a_hub_that_keeps_exiting_is_given_up_on_loudly(tmp_path):
    hub = Hub(tmp_path, "raise SystemExit(1)")
    said: list[str] = []
    keeper = keep_hub(hub, hub.log, said.append, budget=RestartBudget(2, clock=lambda: 100.0))
    keeper.start(watch=False)
    for _ in range(3):
        keeper.procs[1].wait()
        keeper.check()
    assert hub.starts == 3 and keeper.procs == {}
    assert "keeps exiting; not restarting it" in said[-1] and "keeps serving" in said[-1]
    keeper.check()  # nothing left to watch
    assert hub.starts == 3
    keeper.stop()


def running(p: psutil.Process) -> bool:
    """Whether `p` still runs, waiting (bounded) for a signalled process to finish exiting;
    a zombie (dead, not yet reaped by whoever adopted it) does not run."""
    try:
        wait_for(lambda: p.status() == psutil.STATUS_ZOMBIE, "exit", timeout=30)
    except psutil.NoSuchProcess:
        return False
    except AssertionError:
        return True
    return False


def test_stop_ends_the_hub_and_its_children(tmp_path):
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    hub = Hub(tmp_path, code)
    keeper = keep_hub(hub, hub.log, lambda m: None)
    keeper.start(watch=False)
    proc = keeper.procs[1]
    wait_for(lambda: "up" in hub.log.read_text(), "the stand-in hub", timeout=30)
    children = psutil.Process(proc.pid).children()
    assert children
    keeper.stop()
    assert proc.returncode is not None
    assert not [c for c in children if running(c)]
    keeper.check()  # stopped: an ended hub is not restarted
    assert hub.starts == 1


def test_log_tail_is_the_end_of_the_log(tmp_path):
    log = tmp_path / "x.log"
    assert log_tail(log) == ""
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99"
