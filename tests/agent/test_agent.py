"""The agent against a real server (uvicorn in a thread, SQLite): tagging processes from a
fake /proc tree, the report passing the server's schema, refusals that stop the agent and
outages that do not."""

from __future__ import annotations

import threading

import pytest

from gpupool.agent.attribute import HostAttributor, ProcessTags
from gpupool.agent.loop import Agent, AgentError, AgentRefused, HttpReporter
from gpupool.agent.report import build_report
from gpupool.api.agents import NodeReportIn
from gpupool.clock import SystemClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.settings import Settings
from gpupool.system import SystemSettings, build_system
from gpupool.telemetry.simulated import SimulatedSource
from tests.support import ServedApp, free_port
from tests.telemetry.telemetry_fakes import write_proc

POD = "3f1c9a2e-5b7d-4e11-9c0a-8d2f6b4a1e77"


def test_processes_are_tagged_with_workload_slurm_job_and_pod(tmp_path):
    root = tmp_path / "proc"
    # a workload's process whose parent carries the marker, inside a Slurm job (cgroup v1)
    write_proc(root, 150, env={"GPUPOOL_WORKLOAD_ID": "w-1"})
    write_proc(root, 151, ppid=150, cgroup="7:memory:/slurm/uid_1000/job_4242/step_0/task_0\n")
    # a process that claims a Slurm job in its environment only: not believed
    write_proc(root, 160, env={"SLURM_JOB_ID": "99"})
    # a job's process under slurmd's step daemon (root; no job cgroup on this host)
    write_proc(root, 175, uid=0, comm="slurmstepd")
    (root / "175" / "cmdline").write_bytes(b"slurmstepd: [77.batch]\0")
    write_proc(root, 176, ppid=175, comm="bash")
    write_proc(root, 180, ppid=176, env={"SLURM_JOB_ID": "99"})
    # ... and one under a user's process that titled itself slurmstepd: not believed
    write_proc(root, 185, uid=1000, comm="slurmstepd")
    (root / "185" / "cmdline").write_bytes(b"slurmstepd: [88.batch]\0")
    write_proc(root, 190, ppid=185)
    # a pod's container (cgroup v2, systemd driver)
    write_proc(
        root,
        170,
        cgroup="0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD.replace('-', '_')}.slice/cri-containerd-ab.scope\n",
    )
    tags = HostAttributor(root).tag([151, 160, 170, 180, 190, 999])
    assert tags[151] == ProcessTags(
        151,
        workload_id="w-1",
        unix_user=tags[151].unix_user,
        command="python3",
        containers={"slurm-job": "4242"},
    )
    assert tags[160].containers == {} and tags[160].workload_id is None
    assert tags[180].containers == {"slurm-job": "77"}
    assert tags[190].containers == {}  # its step daemon does not run as root
    assert tags[170].containers == {"pod": POD}
    assert tags[999] == ProcessTags(999)  # vanished


def test_the_report_passes_the_servers_schema():
    sim = SimulatedSource("2xH100-80GB,1xA100-40GB", hostname="gpu-a")
    sim.add_process(0, 10, memory_mib=100, sm_util=5.0)
    sim.add_process(2, 11, memory_mib=200, mps=True)
    tags = {
        10: ProcessTags(10, workload_id="w-1", containers={"slurm-job": "7"}, command="x" * 999)
    }
    body = build_report(sim.snapshot(), tags, interval_s=5.0, cpu_milli=1000, memory_mib=2048)
    got = NodeReportIn.model_validate(body)
    assert [g.uuid for g in got.gpus] == [sim.uuid(i) for i in range(3)]
    assert got.simulated is True
    procs = {p.pid: p for p in got.processes}
    assert procs[10].workload_id == "w-1" and len(procs[10].command or "") == 256
    assert procs[11].kind == "mps" and procs[11].workload_id is None


@pytest.fixture
def server(tmp_path):
    from gpupool.domain import User
    from gpupool.server.services.accounts import issue_token
    from gpupool.store import UserRepo, open_store

    store = open_store(f"sqlite:///{tmp_path}/gp.db")
    clock = SystemClock()
    with store.write() as s:
        UserRepo(s).create(User("root", admin=True), None, clock.now())
    app = build_system(
        SystemSettings(server=Settings(database_url=store.url, start_loops=False)),
        FakeEngine(FakeExecutor(clock)),
        clock=clock,
        store=store,
    ).app
    admin = issue_token(app.state.ctx, "root", "test", None).token
    with ServedApp(app) as url:
        yield url, admin
    store.close()


def node_token(url: str, admin: str, node: str) -> str:
    import httpx

    r = httpx.post(
        f"{url}/api/v1/nodes/{node}/tokens", headers={"Authorization": f"Bearer {admin}"}
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_agent_reports_until_stopped(server, tmp_path):
    url, admin = server
    reporter = HttpReporter(url, "gpu-a", node_token(url, admin, "gpu-a"))
    agent = Agent(
        SimulatedSource("2xH100-80GB", hostname="gpu-a"),
        reporter,
        interval_s=0.1,
        tagger=HostAttributor(tmp_path),
    )
    stop = threading.Event()
    acks = []

    def on_ack(ack):
        acks.append(ack)
        if len(acks) == 2:
            stop.set()

    agent.run(stop, on_ack=on_ack)
    assert [a["node"] for a in acks] == ["gpu-a", "gpu-a"] and acks[0]["gpus"] == 2
    assert agent.stats.reports == 2 and agent.stats.failures == 0


def test_a_foreign_credential_stops_the_agent_with_what_to_do(server, tmp_path):
    url, admin = server
    reporter = HttpReporter(url, "gpu-b", node_token(url, admin, "gpu-a"))
    agent = Agent(
        SimulatedSource("1xH100-80GB", hostname="gpu-b"),
        reporter,
        interval_s=0.1,
        tagger=HostAttributor(tmp_path),
    )
    with pytest.raises(AgentRefused, match="reports for node 'gpu-a'.*--node gpu-a"):
        agent.run(threading.Event())
    assert agent.stats.failures == 1


def test_intervals_the_server_would_refuse_are_refused_at_once(tmp_path):
    with pytest.raises(ValueError, match="0.1..3600 s, not 0.05"):
        Agent(SimulatedSource("1xH100-80GB"), HttpReporter("http://x", "n", "t"), interval_s=0.05)


def test_an_unreachable_server_is_retried_not_fatal(tmp_path):
    reporter = HttpReporter(f"http://127.0.0.1:{free_port()}", "gpu-a", "gpn_x", timeout_s=2)
    agent = Agent(
        SimulatedSource("1xH100-80GB"), reporter, interval_s=0.1, tagger=HostAttributor(tmp_path)
    )
    with pytest.raises(AgentError) as e:
        agent.report_once()
    assert not isinstance(e.value, AgentRefused)
    assert "cannot reach the gpupool server" in str(e.value)
    stop = threading.Event()
    calls = []
    real = agent.report_once

    def counted():
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        return real()

    agent.report_once = counted  # run() keeps going through failures
    agent.run(stop)
    assert len(calls) == 3 and agent.stats.failures == 4
