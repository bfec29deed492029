"""One pool over two engines with real parts: the local engine on simulated GPUs (its jobs
are real processes on this host) and the Slurm engine on the real one-node Slurm CI starts
(scripts/services.sh start_slurm: four GPUs declared as gres). Node names differ (the local
engine's is `--node-name mixed-ws`; the Slurm node is this host's name).

- a tenant's work runs on both engines, pinned to each (`engine` on submit);
- a guaranteed tenant reclaims a GPU borrowed on each engine: the borrower's job ends there
  (a process signalled / a Slurm job cancelled) and goes back to the queue;
- `kill -9` of a real `gpupool up --engine local --engine slurm` while work runs on both:
  after a restart every workload still runs, and each started exactly once (every job
  appends a line to its own marker file at each start).

- a notebook on each engine (the one notebook protocol: the engine runs the server and
  reports where it listens), reached at the endpoint each engine reported.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.domain.placement import ENGINE_LABEL
from gpupool.engines.local.engine import LocalEngine, LocalOptions
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import AllocationRepo, NodeRepo, WorkloadRepo, open_store
from gpupool.system import System, SystemSettings, build_system
from tests.engines.mixed import Driven, marked, marker_dir, seed_members, starts
from tests.slurm.conftest import sacct, sh
from tests.support import GpupoolUp, end_process, free_port, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
API = "/api/v1"
LOCAL_NODE = "mixed-ws"
PASSWORD = "mixed pool password"


@pytest.fixture
def markers() -> Iterator[Path]:
    with marker_dir() as d:
        yield d


@dataclass
class Mixed(Driven):
    def engine_of(self, wid: str) -> str:
        """The engine label of the node of the workload's (last) allocation."""
        with self.system.ctx.store.read() as s:
            last = AllocationRepo(s).last_for(wid)
            assert last is not None, wid
            return NodeRepo(s).get(last[0].node).label_map[ENGINE_LABEL]


@pytest.fixture
def mixed(slurm, tmp_path, output_dir) -> Iterator[Callable[[], Mixed]]:
    """A system over the local engine (2 simulated H100s, node mixed-ws) and the real
    Slurm (4 GPUs); tenants `lab` (guaranteed 2) and `other` (guaranteed 1), both up to 6."""
    url = f"sqlite:///{tmp_path}/gpupool.db"
    clock = ManualClock(time.time())
    built: list[tuple[System, TestClient]] = []
    data_dir = Path(tempfile.mkdtemp(prefix="gpupool-mixed-data-"))

    def make() -> Mixed:
        store = open_store(url)
        if not built:
            seed_members(store, clock.now(), limit=6)
        local = LocalEngine(LocalOptions(simulate="2xH100-80GB", node=LOCAL_NODE))
        slurm_engine = SlurmEngine(SlurmOptions(output_dir=output_dir, accounts_interval_s=0))
        settings = SystemSettings(
            server=Settings(database_url=url, start_loops=False), data_dir=data_dir
        )
        system = build_system(settings, [local, slurm_engine], clock=clock, store=store)
        client = TestClient(system.app, raise_server_exceptions=False)
        client.__enter__()
        built.append((system, client))
        names = ("root", "slann", "slbob")
        tokens = {n: issue_token(system.ctx, n, "t", None).token for n in names}
        return Mixed(system, client, clock, tokens)

    yield make
    for system, client in built:
        with system.ctx.store.read() as s:
            active = [r.workload.id for r in WorkloadRepo(s).list() if r.workload.active]
        for wid in active:
            system.executor.stop(wid, "test over", 0.0)
            subprocess.run(["scancel", "--name", f"gpupool-{wid}"], capture_output=True)
        client.__exit__(None, None, None)
        system.stop()
        system.ctx.store.close()
    subprocess.run(["rm", "-rf", str(data_dir)], check=False)


def test_one_tenant_runs_on_both_engines_and_a_guarantee_reclaims_on_each(mixed, markers):
    w = mixed()
    nodes = {n.name: n.label_map for n in _nodes(w)}
    assert nodes[LOCAL_NODE][ENGINE_LABEL] == "local"
    assert {labels[ENGINE_LABEL] for labels in nodes.values()} == {"local", "slurm"}
    # "other" (guaranteed 1) borrows all six GPUs: two local, four in Slurm
    bob = [
        w.submit("slbob", gpus=1, command=marked(markers), engine=engine)
        for engine in ("local", "local", "slurm", "slurm", "slurm", "slurm")
    ]
    w.schedule()
    for wid in bob:
        w.settle("slbob", wid, {"running"})
    assert [w.engine_of(wid) for wid in bob] == ["local"] * 2 + ["slurm"] * 4
    wait_for(lambda: all(starts(markers, wid) == 1 for wid in bob), "every job to start once")
    w.clock.advance(w.system.ctx.settings.scheduler.min_runtime_s + 1)
    # "lab", within its guarantee of 2, wants one GPU on each engine
    ann = {
        engine: w.submit("slann", gpus=1, command=marked(markers), engine=engine)
        for engine in ("local", "slurm")
    }
    w.schedule()
    w.clock.advance(w.system.ctx.settings.scheduler.reclaim_after_s)
    w.schedule()
    victims = [wid for wid in bob if _stopping(w, wid)]
    assert sorted(w.engine_of(v) for v in victims) == ["local", "slurm"], victims
    for v in victims:
        back = w.settle("slbob", v, {"pending"})  # ended on its engine, back in the queue
        assert back["preemptions"] == 1
    slurm_victim = next(v for v in victims if w.engine_of(v) == "slurm")
    # slurmdbd records a job a moment after slurmctld ends it: poll, bounded
    job = wait_for(
        lambda: sh(
            "sacct", "-a", "-n", "-X", "-P", "--name", f"gpupool-{slurm_victim}", "-o", "JobID"
        ).split(),
        "slurmdbd to record the cancelled job",
    )
    assert sacct(job[0])["state"]["current"] in ("CANCELLED", "FAILED")
    w.schedule()
    for engine, wid in ann.items():
        w.settle("slann", wid, {"running"})
        assert w.engine_of(wid) == engine
    wait_for(lambda: all(starts(markers, wid) == 1 for wid in ann.values()), "lab's starts")
    assert all(starts(markers, wid) == 1 for wid in bob)  # the victims ran once so far


#: a stand-in for jupyterhub-singleuser: listens where JUPYTERHUB_SERVICE_URL says (each
#: engine points it at the port it chose); the system's Python, which every account can run
SERVER = r"""
import os, http.server, urllib.parse as up
u = up.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
http.server.HTTPServer((u.hostname, u.port), http.server.BaseHTTPRequestHandler).serve_forever()
"""
PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin")


@pytest.mark.skipif(PYTHON is None, reason="no system python3 for the notebook's accounts")
def test_a_notebook_on_each_engine_reports_where_it_listens(mixed):
    w = mixed()
    hub_env = {"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:0/user/slann/"}
    nbs = {
        engine: w.submit(
            "slann", kind="notebook", gpus=1, command=[PYTHON, "-c", SERVER], env=hub_env,
            engine=engine,
        )
        for engine in ("local", "slurm")
    }  # fmt: skip
    w.schedule()

    def endpoint(wid: str) -> str | None:
        w.reconcile()
        got = w.get("slann", wid)
        assert got["state"] in ("admitted", "starting", "running"), got
        return got["endpoint"] if got["state"] == "running" else None

    for engine, wid in nbs.items():
        url = wait_for(lambda wid=wid: endpoint(wid), f"the {engine} notebook's endpoint")
        assert w.engine_of(wid) == engine
        # the server answers there (BaseHTTPRequestHandler: 501 to a GET, an answer all the same)
        assert httpx.get(url, timeout=10).status_code == 501, url
    for wid in nbs.values():
        r = w.client.delete(f"{API}/workloads/{wid}", headers=w.h("slann"))
        assert r.status_code in (200, 202), r.text
        w.settle("slann", wid, {"cancelled"})


def _nodes(w: Mixed) -> list:
    with w.system.ctx.store.read() as s:
        return NodeRepo(s).list()


def _stopping(w: Mixed, wid: str) -> bool:
    return any(e["kind"] == "workload.stopping" for e in w.get("slbob", wid)["events"])


def up(data_dir: Path, out: Path, port: int) -> GpupoolUp:
    """A real `gpupool up` with the local engine (simulated GPUs) and the Slurm engine."""
    return GpupoolUp(
        ["--engine", "local", "--engine", "slurm", "--simulate", "2xH100-80GB",
         "--node-name", LOCAL_NODE, "--data-dir", str(data_dir), "--no-jupyterhub",
         "--workers", "0", "--slurm-output-dir", str(out)],
        port, PASSWORD,
    )  # fmt: skip


def test_kill_9_of_a_mixed_pool_loses_nothing_and_starts_nothing_twice(slurm, tmp_path, markers):
    out = Path(tempfile.mkdtemp(prefix="gpupool-mixed-out-"))
    data, port = Path(tempfile.mkdtemp(prefix="gpupool-mixed-up-")), free_port()
    ups = [up(data, out, port)]
    wids: list[str] = []
    try:
        ups[0].wait_ready()
        h = ups[0].login()
        said = "".join(ups[0].lines)
        assert "2 engines in one pool: local, slurm (default local)" in said, said
        url = ups[0].url
        # Slurm runs the admin's jobs as a member's own account (per-user as root)
        assert httpx.patch(
            f"{url}{API}/users/admin", headers=h, json={"unix_user": "slann"}
        ).status_code == 200  # fmt: skip
        mix = {"name": "mix", "quota": {"limit": 6}}
        r = httpx.post(f"{url}{API}/tenants", headers=h, json=mix)
        assert r.status_code == 201, r.text

        def submit(engine: str) -> str:
            body = {"gpus": 1, "command": marked(markers), "tenant": "mix", "engine": engine}
            r = httpx.post(f"{url}{API}/workloads", headers=h, json=body)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        def state(wid: str) -> str:
            return httpx.get(f"{url}{API}/workloads/{wid}", headers=h).json()["state"]

        wids = [submit(e) for e in ("local", "local", "slurm", "slurm")]
        wait_for(lambda: all(state(x) == "running" for x in wids), "all running", timeout=90)
        wait_for(lambda: all(starts(markers, x) == 1 for x in wids), "every job started once")
        slurm_jobs = {x: _slurm_jobs(x) for x in wids[2:]}
        assert all(len(j) == 1 for j in slurm_jobs.values()), slurm_jobs

        ups[0].proc.send_signal(signal.SIGKILL)  # work runs on both engines
        ups[0].proc.wait(30)
        ups.append(up(data, out, port))
        ups[1].wait_ready()
        h = ups[1].login()
        # a job submitted after the restart runs: the loops have passed over the old work
        late = submit("slurm")
        wait_for(lambda: state(late) == "running", "a job after the restart runs", timeout=90)
        for wid in wids:
            got = httpx.get(f"{url}{API}/workloads/{wid}", headers=h).json()
            assert got["state"] == "running", got
            kinds = {e["kind"] for e in got["events"]}
            assert not kinds & {"workload.lost", "workload.requeued"}, kinds
        assert all(starts(markers, x) == 1 for x in [*wids, late])  # nothing ran twice
        assert {x: _slurm_jobs(x) for x in wids[2:]} == slurm_jobs  # the same Slurm jobs
        wids.append(late)
        for wid in wids:
            httpx.delete(f"{url}{API}/workloads/{wid}", headers=h)
        wait_for(lambda: all(state(x) == "cancelled" for x in wids), "all cancelled", timeout=90)
    finally:
        for wid in wids:
            subprocess.run(["scancel", "--name", f"gpupool-{wid}"], check=False)
        for each in ups:
            end_process(each.proc)
        subprocess.run(["rm", "-rf", str(out), str(data)], check=False)


def _slurm_jobs(wid: str) -> list[str]:
    """Ids of every Slurm job named for the workload (squeue keeps ended ones a while)."""
    return sh("squeue", "-h", "-t", "all", "--name", f"gpupool-{wid}", "-o", "%i").split()
