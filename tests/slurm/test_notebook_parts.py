"""The parts of notebooks on Slurm that need no Slurm: the job script run by a real shell
(port chosen, written, the hub's service URL moved to it), reading the port back, and the
environment the remote spawner hands to gpupool."""

from __future__ import annotations

import os
import subprocess
import sys

from gpupool.engines.slurm.notebooks import endpoint, notebook_script, read_port
from gpupool.jupyterhub.remote import remote_env


def test_the_job_script_picks_a_port_writes_it_and_moves_the_service_url(tmp_path):
    port_path = tmp_path / "w-1.port"
    port_path.touch()
    command = ["sh", "-c", 'echo "$GPUPOOL_NOTEBOOK_PORT $JUPYTERHUB_SERVICE_URL" "$@"', "-", "a b"]
    script = notebook_script(command, port_path, python=sys.executable)
    env = dict(os.environ, JUPYTERHUB_SERVICE_URL="http://127.0.0.1:0/user/ann/")
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    port, url, arg = out.stdout.split(" ", 2)
    assert read_port(port_path) == int(port) > 0
    assert url == f"http://0.0.0.0:{port}/user/ann/"
    assert arg.strip() == "a b"  # the command's arguments arrive as given


def test_without_a_hub_url_the_port_is_still_given(tmp_path):
    port_path = tmp_path / "w-2.port"
    script = notebook_script(
        ["sh", "-c", 'echo "$GPUPOOL_NOTEBOOK_PORT"'], port_path, sys.executable
    )
    env = {k: v for k, v in os.environ.items() if k != "JUPYTERHUB_SERVICE_URL"}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and int(out.stdout) == read_port(port_path)


def test_ports_are_read_only_when_they_are_ports(tmp_path):
    p = tmp_path / "x.port"
    assert read_port(p) is None  # not written yet
    p.write_text("")
    assert read_port(p) is None
    p.write_text("99999\n")
    assert read_port(p) is None
    p.write_text("8888\n")
    assert read_port(p) == 8888
    assert endpoint("10.0.0.5", 8888) == "http://10.0.0.5:8888"
    assert endpoint("fe80::1", 8888) == "http://[fe80::1]:8888"


def test_the_remote_env_leaves_out_gpu_binding_and_the_hub_hosts_account():
    env = {
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_SERVICE_URL": "http://x/",
        "CUDA_VISIBLE_DEVICES": "0",
        "GPUPOOL_WORKLOAD_ID": "w",
        "HOME": "/root",
        "USER": "root",
        "PATH": "/root/bin",
        "LANG": "C.UTF-8",
    }
    assert remote_env(env) == {
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_SERVICE_URL": "http://x/",
        "LANG": "C.UTF-8",
    }


def test_a_notebook_endpoint_is_reported_only_once_something_listens(tmp_path):
    """The job writes its port before the server binds it; a server that dies at once must
    not be offered to the hub (it would wait for it until its own timeout): the job's end
    is reported instead."""
    import socket

    from gpupool.domain import Request, Workload, WorkloadKind
    from gpupool.engines.common.executor import ExecState
    from tests.slurm.test_executor_logic import make

    slurm, _, ex = make(tmp_path)
    w = Workload("nb-1", "lab", "ann", Request(gpus=0), command=("jupyterhub-singleuser",),
                 kind=WorkloadKind.NOTEBOOK)  # fmt: skip
    ex.start(w, None)
    ex.node_addresses["n1"] = "127.0.0.1"
    with socket.socket() as s:  # a port nothing listens on (bound, not listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        (tmp_path / "out" / "nb-1.port").write_text(f"{port}\n")
        slurm.set("nb-1", job_state="RUNNING", batch_host="n1", start_time=1000)
        st = ex.poll("nb-1")
        assert st.state is ExecState.RUNNING and st.endpoint is None  # refused: not yet
        s.listen()
        assert ex.poll("nb-1").endpoint == f"http://127.0.0.1:{port}"
    assert ex.poll("nb-1").endpoint == f"http://127.0.0.1:{port}"  # once served: kept
    slurm.set("nb-1", job_state="FAILED", exit_code=256, end_time=1001)
    assert ex.poll("nb-1").state is ExecState.FAILED


def test_a_notebook_that_dies_at_once_is_reported_failed_not_served(tmp_path):
    from gpupool.domain import Request, Workload, WorkloadKind
    from gpupool.engines.common.executor import ExecState
    from tests.slurm.test_executor_logic import make
    from tests.support import free_port

    slurm, _, ex = make(tmp_path)
    w = Workload("nb-2", "lab", "ann", Request(gpus=0), command=("jupyterhub-singleuser",),
                 kind=WorkloadKind.NOTEBOOK)  # fmt: skip
    ex.start(w, None)
    ex.node_addresses["n1"] = "127.0.0.1"
    (tmp_path / "out" / "nb-2.port").write_text(f"{free_port()}\n")  # written, then it died
    slurm.set("nb-2", job_state="RUNNING", batch_host="n1", start_time=1000)
    assert ex.poll("nb-2").endpoint is None
    slurm.set("nb-2", job_state="FAILED", exit_code=256, end_time=1001)
    st = ex.poll("nb-2")
    assert st.state is ExecState.FAILED and st.endpoint is None
