"""`gpupool up` as a real subprocess on a free port: it starts, answers /healthz, the first
admin logs in, a job runs on a simulated GPU and sees it; kill -9 of the server while the job
runs, start again: the job is adopted (not relaunched, not lost) and gets its real exit code.

Waits here are bounded waits on the server subprocess (its output, its HTTP answers), never
assumptions about how long something takes."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from gpupool.engines.local.engine import mps_base
from tests.engines.conftest import mkfifo, release, wait_ready
from tests.support import GpupoolUp, end_process, free_hub_port, free_port, wait_for

pytestmark = pytest.mark.slow
PASSWORD = "up-test-password"
#: The `gpupool` command, run by this interpreter.
GPUPOOL = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]


#: every `Up` started by the running test (ended by `no_up_left`)
STARTED: list[Up] = []


class Up(GpupoolUp):
    """One `gpupool up` process on simulated GPUs, single-user (as root its jobs run as
    nobody, an account that exists: tests create no accounts on the host), no JupyterHub and
    no API workers unless `extra` says; ended after the test (`no_up_left`)."""

    def __init__(self, data_dir: Path, port: int, *extra: str, env: dict[str, str] | None = None):
        args = (
            ["--simulate", "2xH100-80GB", "--data-dir", str(data_dir), "--user-mode", "single-user"]
            + ([] if "--jupyterhub" in extra else ["--no-jupyterhub"])
            + ([] if "--workers" in extra else ["--workers", "0"])  # not by this host's CPUs
            + (["--jobs-account", "nobody"] if os.geteuid() == 0 else [])
            + list(extra)
        )
        super().__init__(args, port, PASSWORD, env=env)
        STARTED.append(self)

    def wait_ready(self, timeout: float = 60) -> None:
        super().wait_ready(timeout)


@pytest.fixture(autouse=True)
def no_up_left() -> Iterator[None]:
    """Every `gpupool up` a test started is ended after it, whatever the outcome (a failed
    assertion before its stop, a stop that timed out)."""
    yield
    while STARTED:
        end_process(STARTED.pop().proc)


def login(url: str) -> dict[str, str]:
    r = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


def workload(url: str, h: dict[str, str], wid: str) -> dict:
    r = httpx.get(f"{url}/api/v1/workloads/{wid}", headers=h)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_up_serves_runs_jobs_and_adopts_them_after_kill_9(data_dir, job_tmp):
    port = free_port()
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o755)  # as earlier versions made it: fixed at start
    up = Up(data_dir, port)
    try:
        up.wait_ready()
        assert httpx.get(f"{up.url}/healthz").json()["process"] == "primary"
        assert "SIMULATED GPUs" in up.output
        assert "single-user mode" in up.output and "never as root" in up.output
        if os.geteuid() == 0:
            assert "unprivileged account 'nobody'" in up.output
        else:
            assert "CAN read and write gpupool's database" in up.output
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((data_dir / "gpupool.db").stat().st_mode) == 0o600
        h = login(up.url)
        readyz = wait_for(lambda: httpx.get(f"{up.url}/readyz").status_code == 200, what="readyz")
        assert readyz
        gpus = httpx.get(f"{up.url}/api/v1/gpus", headers=h).json()
        uuids = {g["uuid"] for g in (gpus["items"] if isinstance(gpus, dict) else gpus)}
        assert len(uuids) == 2

        ready, go = mkfifo(job_tmp / "ready"), mkfifo(job_tmp / "go")
        cmd = f'echo "CVD=$CUDA_VISIBLE_DEVICES"; echo up > {ready}; read x < {go}; exit 5'
        r = httpx.post(
            f"{up.url}/api/v1/workloads",
            headers=h,
            json={"gpus": 1, "command": ["sh", "-c", cmd], "tenant": "default"},
        )
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        wait_ready(ready, timeout=60)  # the job runs
        got = wait_for(
            lambda: (w := workload(up.url, h, wid))["state"] == "running" and w, what="running"
        )
        gpu = got["allocation"]["shares"][0]["gpu_uuid"]
        assert gpu in uuids
        log = (data_dir / "jobs" / wid / "output.log").read_text()
        assert log.splitlines() == [f"CVD={gpu}"]
        job_pid = int((data_dir / "jobs" / wid / "pid").read_text().split()[0])

        second = subprocess.run(
            [*GPUPOOL, "up", "--simulate", "1xH100-80GB", "--no-jupyterhub"]
            + ["--data-dir", str(data_dir), "--port", str(free_port())],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2 and "already running" in second.stderr

        up.stop(signal.SIGKILL)  # the server dies hard; the job must survive
        assert psutil.pid_exists(job_pid)

        up = Up(data_dir, port)
        up.wait_ready()
        assert "first admin created" not in up.output  # the admin exists already
        h = login(up.url)
        assert workload(up.url, h, wid)["state"] == "running"
        # adopted, not relaunched: one launch, one line of output
        assert (data_dir / "jobs" / wid / "output.log").read_text().splitlines() == [f"CVD={gpu}"]
        # no double allocation: a second 1-GPU job gets the other GPU
        r2 = httpx.post(
            f"{up.url}/api/v1/workloads",
            headers=h,
            json={"gpus": 1, "command": ["true"], "tenant": "default"},
        )
        w2 = r2.json()["id"]
        done2 = wait_for(
            lambda: (w := workload(up.url, h, w2))["state"] == "succeeded" and w, what="job 2"
        )
        assert done2["exit_code"] == 0
        assert done2["allocation"]["shares"][0]["gpu_uuid"] == (uuids - {gpu}).pop()

        release(go)
        final = wait_for(
            lambda: (w := workload(up.url, h, wid))["state"] in ("failed", "succeeded") and w,
            what="the adopted job's end",
        )
        assert final["state"] == "failed" and final["exit_code"] == 5
        assert up.stop(signal.SIGINT) == 0
        assert "adopted on the next start" in up.output
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


def test_up_rejects_a_bad_simulation_spec(data_dir):
    r = subprocess.run(
        [*GPUPOOL, "up", "--simulate", "3xNOPE", "--data-dir"] + [str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "--simulate '3xNOPE'" in r.stderr and "Traceback" not in r.stderr


def test_up_rejects_a_bad_scheduler_variable(data_dir):
    r = subprocess.run(
        [*GPUPOOL, "up", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, GPUPOOL_SERVICE_LEVELS_S="1h"),
    )
    assert r.returncode == 2
    assert "GPUPOOL_SERVICE_LEVELS_S='1h'" in r.stderr and "Traceback" not in r.stderr


def test_up_refuses_a_malformed_budget_webhook_without_printing_its_secret(data_dir):
    """The URL may carry a token in its user info or query: the refusal shows scheme and
    host only (gpupool.server.webhook.redact_url), for the flag and the variable alike."""
    secret = "s3cr3t-T0KEN"
    bad = f"ftp://bot:{secret}@hooks.example.org/x?token={secret}"
    for flags, env in (
        (["--budget-webhook", bad], {}),
        ([], {"GPUPOOL_BUDGET_WEBHOOK_URL": bad}),
    ):
        r = subprocess.run(
            [*GPUPOOL, "up", "--data-dir", str(data_dir), *flags],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, **env),
        )
        assert r.returncode == 2, r.stderr
        assert secret not in r.stdout + r.stderr
        assert "'ftp://hooks.example.org/…'" in r.stderr and "Traceback" not in r.stderr


def test_up_kubernetes_runs_jobs_as_pods_of_the_cluster(data_dir, tmp_path):
    pytest.importorskip("kubernetes")
    from tests.kubernetes.fakeapi import FakeKube

    kube = FakeKube().start()
    kube.add_node("gpu-1", 2, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    config = tmp_path / "kubeconfig"
    kube.kubeconfig(config)
    up = Up(
        data_dir,
        free_port(),
        "--engine",
        "kubernetes",
        "--kubeconfig",
        str(config),
        "--home-size",
        "5Gi",
        "--home-storage-class",
        "fast",
    )
    try:
        up.wait_ready()
        assert "kubernetes engine on " + kube.url in up.output
        # on by default: the tenant's namespace gets the metadata-blocking policy
        policies = kube.objects["networkpolicies"]
        assert ("gpupool-default", "gpupool-block-cloud-metadata") in policies
        home = kube.objects["persistentvolumeclaims"][("gpupool-default", "home-admin")]
        assert home["spec"]["storageClassName"] == "fast"
        assert home["spec"]["resources"]["requests"]["storage"] == "5Gi"
        h = login(up.url)
        gpus = httpx.get(f"{up.url}/api/v1/gpus", headers=h).json()
        items = gpus["items"] if isinstance(gpus, dict) else gpus
        assert sorted(g["uuid"] for g in items) == ["k8s:gpu-1:0", "k8s:gpu-1:1"]
        r = httpx.post(
            f"{up.url}/api/v1/workloads",
            headers=h,
            json={"gpus": 1, "command": ["nvidia-smi"], "tenant": "default"},
        )
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        assert wait_for(lambda: kube.pods_of(f"gpupool.dev/workload={wid}"), what="the pod")
        (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
        kube.set_phase(
            "gpupool-default", pod["metadata"]["name"], "Failed", node="gpu-1", exit_code=4
        )
        done = wait_for(lambda: workload(up.url, h, wid)["state"] == "failed", what="failed")
        assert done and workload(up.url, h, wid)["exit_code"] == 4
    finally:
        assert up.stop() == 0, up.output
        kube.stop()


@pytest.mark.parametrize(
    ("flags", "blocked"),
    [
        ([], True),
        (["--no-block-cloud-metadata"], False),
        (["--no-block-cloud-metadata", "--block-cloud-metadata"], True),  # hidden, for scripts
    ],
)
def test_up_kubernetes_block_cloud_metadata_flag(monkeypatch, flags, blocked):
    pytest.importorskip("kubernetes")
    from typer.testing import CliRunner

    from gpupool.cli import up as up_module
    from gpupool.cli.main import app

    seen: dict = {}
    monkeypatch.setattr(up_module, "serve", lambda **kw: seen.update(kw))
    r = CliRunner().invoke(app, ["up", "--engine", "kubernetes", *flags])
    assert r.exit_code == 0, r.output
    assert seen["engine"] == "kubernetes"
    assert seen["options"].tenancy.block_cloud_metadata is blocked


def test_up_kubernetes_pod_security_flags(monkeypatch):
    """--pod-security and --run-as-user reach the pods' settings; a level Kubernetes has but
    gpupool does not offer (privileged) is refused, saying which ones it takes."""
    pytest.importorskip("kubernetes")
    from typer.testing import CliRunner

    from gpupool.cli import up as up_module
    from gpupool.cli.main import app

    seen: dict = {}
    monkeypatch.setattr(up_module, "serve", lambda **kw: seen.update(kw))
    r = CliRunner().invoke(app, ["up", "--engine", "kubernetes"])
    assert r.exit_code == 0, r.output
    pods = seen["options"].pods
    assert (pods.pod_security, pods.run_as_user, pods.run_as_group) == ("restricted", 1000, 1000)
    flags = ["--pod-security", "baseline", "--run-as-user", "4242"]
    r = CliRunner().invoke(app, ["up", "--engine", "kubernetes", *flags])
    assert r.exit_code == 0, r.output
    pods = seen["options"].pods
    assert (pods.pod_security, pods.run_as_user, pods.run_as_group) == ("baseline", 4242, 4242)
    r = CliRunner().invoke(app, ["up", "--engine", "kubernetes", "--run-as-user", "0"])
    assert r.exit_code == 2  # root is never a job's uid
    r = CliRunner().invoke(app, ["up", "--engine", "kubernetes", "--pod-security", "privileged"])
    assert r.exit_code == 2
    assert "--pod-security must be one of restricted, baseline, not 'privileged'" in r.output


def test_up_kubernetes_without_a_cluster_says_what_to_do(data_dir, tmp_path):
    pytest.importorskip("kubernetes")
    config = tmp_path / "kubeconfig"
    config.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "x",'
        ' "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}],'
        ' "users": [{"name": "x", "user": {}}],'
        ' "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}'
    )
    r = subprocess.run(
        [
            *GPUPOOL,
            "up",
            "--engine",
            "kubernetes",
            "--kubeconfig",
            str(config),
            "--data-dir",
            str(data_dir),
            "--no-jupyterhub",
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "cannot list nodes" in r.stderr and "kubeconfig" in r.stderr


def test_up_engine_slurm_without_slurm_says_what_to_install(data_dir):
    env = {**os.environ, "PATH": "/nonexistent"}
    r = subprocess.run(
        [*GPUPOOL, "up", "--engine", "slurm", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    assert "cannot use Slurm: sinfo is not installed" in r.stderr
    assert "slurm-client" in r.stderr and "Traceback" not in r.stderr


def test_up_help_offers_the_engine_option():
    r = subprocess.run([*GPUPOOL, "up", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--engine" in r.stdout and "kubernetes" in r.stdout


@pytest.mark.skipif(
    __import__("shutil").which("configurable-http-proxy") is None,
    reason="configurable-http-proxy is not installed (scripts/services.sh installs it)",
)
def test_up_refuses_a_hub_port_another_program_holds(data_dir):
    """The hub would otherwise exit into its log while gpupool serves on as if all were well."""
    import socket

    port = free_port()
    hub_port = free_hub_port(port)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", hub_port + 81))
        holder.listen()
        up = Up(data_dir, port, "--jupyterhub", "--hub-port", str(hub_port))
        rc = up.proc.wait(60)  # it exits by itself
        up._reader.join(10)
        assert rc == 2, up.output
    assert f"{hub_port + 81} (the hub's API) is in use" in up.output, up.output
    assert "--hub-port" in up.output and "Traceback" not in up.output


@pytest.mark.skipif(
    __import__("shutil").which("configurable-http-proxy") is None,
    reason="configurable-http-proxy is not installed (scripts/services.sh installs it)",
)
@pytest.mark.parametrize("workers", ["0", "2"])
def test_up_with_jupyterhub_starts_and_stops_the_hub(data_dir, workers):
    port = free_port()
    hub_port = free_hub_port(port)
    up = Up(data_dir, port, "--jupyterhub", "--hub-port", str(hub_port), "--workers", workers)
    try:
        up.wait_ready()
        assert "JupyterHub on" in up.output
        hub = f"http://127.0.0.1:{hub_port}/hub/api/"

        def answers() -> bool:
            try:
                return httpx.get(hub, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        def hub_answers() -> None:
            try:
                wait_for(answers, timeout=120, what="JupyterHub")
            except AssertionError as e:
                log = data_dir / "hub" / "jupyterhub.log"
                hub_log = log.read_text()[-4000:] if log.exists() else "(no hub log)"
                raise AssertionError(f"{e}\n--- up:\n{up.output}\n--- hub:\n{hub_log}") from e

        hub_answers()
        # the dashboard is a hub service with single sign-on: through the hub's proxy it
        # sends a browser to the hub's OAuth flow instead of answering 404
        sso = httpx.get(
            f"http://127.0.0.1:{hub_port}/services/gpupool/dashboard/cluster",
            headers={"accept": "text/html"},  # a browser's page request
            timeout=10,
            follow_redirects=True,
        )
        assert sso.status_code == 200, sso.text[:300]
        assert "/hub/" in str(sso.url), sso.url  # the hub's login page, on the way to OAuth
        # a hub that dies is said so, with its log, and started again
        first = int((data_dir / "hub" / "jupyterhub.pid").read_text())
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: "restarting JupyterHub" in up.output, "the restart", timeout=60)
        assert "JupyterHub exited with code -9" in up.output
        wait_for(
            lambda: int((data_dir / "hub" / "jupyterhub.pid").read_text() or 0) != first,
            "the new hub's pid file",
        )
        hub_answers()
        pid = int((data_dir / "hub" / "jupyterhub.pid").read_text())
        assert up.stop(signal.SIGINT) == 0
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    finally:
        if up.proc.poll() is None:
            up.proc.kill()


def test_up_with_mps_gives_fractional_jobs_mps_limits(data_dir, tmp_path):
    from tests.engines.conftest import make_fake_mps_binary

    binary = make_fake_mps_binary(tmp_path / "bin")
    up = Up(data_dir, free_port(), "--mps", "on", "--mps-binary", binary)
    pid_file = None
    try:
        up.wait_ready()
        assert "enforced by CUDA MPS" in up.output
        h = login(up.url)
        gpus = httpx.get(f"{up.url}/api/v1/gpus", headers=h).json()
        uuid = sorted(g["uuid"] for g in (gpus["items"] if isinstance(gpus, dict) else gpus))[0]
        pid_file = mps_base(data_dir.resolve()) / uuid / "pipe" / "nvidia-cuda-mps-control.pid"
        r = httpx.patch(f"{up.url}/api/v1/gpus/{uuid}", headers=h, json={"sharing": "shared"})
        assert r.status_code == 200, r.text
        cmd = "env | grep -E '^CUDA_(MPS|VISIBLE)' | sort"
        r = httpx.post(
            f"{up.url}/api/v1/workloads",
            headers=h,
            json={
                "gpu_fraction": 0.25,
                "gpu_memory_mib": 8192,
                "command": ["sh", "-c", cmd],
                "tenant": "default",
            },
        )
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        done = wait_for(
            lambda: (w := workload(up.url, h, wid))["state"] == "succeeded" and w, what="job"
        )
        assert done["allocation"]["shares"][0]["enforcement"] == "mps"
        out = (data_dir / "jobs" / wid / "output.log").read_text()
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M" in out
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in out
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in out
        daemon = int(pid_file.read_text())
        assert up.stop(signal.SIGINT) == 0
        wait_for(lambda: not psutil.pid_exists(daemon), timeout=30, what="the MPS daemon to quit")
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            if pid_file is not None:  # never leave a stand-in daemon behind
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.skipif(os.geteuid() != 0, reason="per-user mode needs root")
def test_up_per_user_mode_runs_jobs_as_their_owners_account(tmp_path):
    import pwd
    import tempfile

    # a data dir outside root's private tmp, as on a real server
    data = Path(tempfile.mkdtemp(prefix="gpupool-up-", dir="/tmp")) / "data"
    up = Up(data, free_port(), "--user-mode", "per-user")
    try:
        up.wait_ready()
        assert "per-user mode" in up.output
        h = login(up.url)
        r = httpx.post(
            f"{up.url}/api/v1/users",
            headers=h,
            json={"name": "bob", "password": "bob-password", "unix_user": "nobody"},
        )
        assert r.status_code == 201, r.text
        r = httpx.put(
            f"{up.url}/api/v1/users/bob/memberships/default", headers=h, json={"role": "member"}
        )
        assert r.status_code == 200, r.text
        tok = httpx.post(
            f"{up.url}/api/v1/auth/login", json={"username": "bob", "password": "bob-password"}
        ).json()["token"]
        hb = {"Authorization": f"Bearer {tok}"}
        r = httpx.post(
            f"{up.url}/api/v1/workloads",
            headers=hb,
            json={"gpus": 1, "command": ["sh", "-c", "id -un; echo $HOME"], "tenant": "default"},
        )
        wid = r.json()["id"]
        wait_for(lambda: workload(up.url, hb, wid)["state"] == "succeeded", what="bob's job")
        lines = (data / "jobs" / wid / "output.log").read_text().splitlines()
        assert lines == ["nobody", pwd.getpwnam("nobody").pw_dir]
        assert (data / "jobs" / wid / "output.log").stat().st_uid == pwd.getpwnam("nobody").pw_uid
        assert up.stop(signal.SIGINT) == 0
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
        import shutil

        shutil.rmtree(data.parent, ignore_errors=True)
