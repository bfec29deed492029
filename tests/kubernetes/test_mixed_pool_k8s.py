"""One pool over the Kubernetes engine and a second engine, built by `build_system` as
`gpupool up --engine kubernetes --engine <other>` builds it. The Kubernetes side is the
stateful fake API server over real HTTP (tests/kubernetes/fakeapi.py), two nodes of two GPUs;
the test plays kube-scheduler and the kubelet (`kubelet`: binds each pod to the node its
required affinity names and runs it; ends pods being deleted). The second engine is the local
engine on two simulated GPUs (its jobs are real processes on this host), or, in a second
parametrisation, the real one-node Slurm (four GPUs; GPUPOOL_TEST_SLURM, skipped otherwise).

- both engines' nodes are registered, each labelled with its engine;
- work pinned to each engine runs there (a pod in the tenant's namespace / a process or a
  Slurm job), unpinned work fills both;
- a two-node gang never spans the engines: with room only across them it waits, and it runs
  on the two Kubernetes nodes once both have room;
- a guaranteed tenant reclaims a GPU borrowed on the Kubernetes engine: the borrower's pod is
  deleted, its workload requeued;
- restarts (a fresh build over the same store, data directory and fake API server) while the
  victim's pod is being deleted and while a new pod is still Pending adopt every pod and the
  other engine's work: nothing lost, nothing started twice, and the adopted work is still
  under control (a cancel deletes its pod; the requeued work then runs);
- the same pool from a real `gpupool up --engine kubernetes --engine local` (loops and
  watches running): `kill -9` while pods and processes run, and a restart adopts both.
"""

from __future__ import annotations

import collections
import contextlib
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
from gpupool.domain.placement import ENGINE_LABEL, MULTI_NODE_LABEL
from gpupool.engines.common.engine import Engine
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.manifests import SELECTOR, WORKLOAD
from gpupool.engines.kubernetes.podstatus import node_of
from gpupool.engines.local.engine import LocalEngine, LocalOptions
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import AllocationRepo, NodeRepo, WorkloadRepo, open_store
from gpupool.system import System, SystemSettings, build_system
from tests.engines.conftest import end_all, throwaway_accounts
from tests.engines.mixed import Driven, marked, marker_dir, seed_members, starts
from tests.kubernetes.fakeapi import FakeKube
from tests.slurm.conftest import slurm  # noqa: F401 - the fixture, for the slurm case
from tests.support import GpupoolUp, end_process, free_port, wait_for

API = "/api/v1"
GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
K8S_NODES = ("k8s-a", "k8s-b")
LOCAL_NODE = "mixed-ws"
#: the second engine's GPUs
GPUS = {"local": 2, "slurm": 4}
LAB, OTHER = "gpupool-lab", "gpupool-other"
NS = "gpupool-default"
PASSWORD = "mixed pool password"
ACTIVE = {"admitted", "starting", "running"}
pytestmark = pytest.mark.slow


@pytest.fixture
def markers() -> Iterator[Path]:
    with marker_dir() as d:
        yield d


def kubelet(kube: FakeKube) -> None:
    """kube-scheduler and the kubelet: a pod being deleted ends (within its grace), a pending
    ungated pod is bound to the node its affinity names and runs."""
    for pod in kube.pods_of(SELECTOR):
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp"):
            kube.vanish(meta["namespace"], meta["name"])
        elif pod["status"].get("phase") == "Pending" and not spec.get("schedulingGates"):
            node = node_of(pod)
            assert node in kube.nodes, pod
            kube.set_phase(meta["namespace"], meta["name"], "Running", node=node)


def pod_creates(kube: FakeKube) -> int:
    """How many pods gpupool asked the API server to create."""
    return sum(1 for m, p in kube.requests if m == "POST" and p.endswith("/pods"))


@dataclass
class Pool(Driven):
    """A built system over the Kubernetes engine and `other`, and the handles to drive it."""

    kube: FakeKube
    other: str

    def cancel(self, user: str, wid: str) -> None:
        r = self.client.delete(f"{API}/workloads/{wid}", headers=self.h(user))
        assert r.status_code in (200, 202), r.text

    def kubelet(self) -> None:
        kubelet(self.kube)

    def step(self) -> None:
        """The (fake) kubelet, then a reconciler pass."""
        self.kubelet()
        self.reconcile()

    def nodes(self) -> dict[str, dict[str, str]]:
        with self.system.ctx.store.read() as s:
            return {n.name: n.label_map for n in NodeRepo(s).list()}

    def nodes_of(self, wid: str) -> tuple[str, ...]:
        """The nodes of the workload's (last) allocation, rank order."""
        with self.system.ctx.store.read() as s:
            last = AllocationRepo(s).last_for(wid)
        assert last is not None, wid
        return last[0].nodes

    def engine_of(self, wid: str) -> str:
        """The engine of the workload's (last) allocation; one engine for all its nodes."""
        labels = self.nodes()
        (engine,) = {labels[n][ENGINE_LABEL] for n in self.nodes_of(wid)}
        return engine

    def pods(self, wid: str) -> list[dict]:
        return self.kube.pods_of(f"{WORKLOAD}={wid}")

    def pod_creates(self) -> int:
        return pod_creates(self.kube)


def _other_engine(name: str, output_dir: Path) -> Engine:
    if name == "local":
        return LocalEngine(LocalOptions(simulate="2xH100-80GB", node=LOCAL_NODE, mps="off"))
    return SlurmEngine(SlurmOptions(output_dir=output_dir, accounts_interval_s=0))


@pytest.fixture(
    params=["local", pytest.param("slurm", marks=pytest.mark.slurm)],
)
def pool(request, kube, tmp_path, monkeypatch) -> Iterator[Callable[[], Pool]]:
    """`pool()` builds the system (Kubernetes first, then the second engine) over one SQLite
    store and data directory; a second call stops the first and builds afresh (a restart).
    Tenants `lab` (guaranteed 2) and `other` (guaranteed 1), both up to 8 GPUs; members
    slann (lab) and slbob (other)."""
    other = request.param
    if other == "slurm":
        request.getfixturevalue("slurm")  # skips, saying why, where no Slurm runs here
    for name in K8S_NODES:
        kube.add_node(name, 2, labels=GFD)
    url = f"sqlite:///{tmp_path}/gpupool.db"
    clock = ManualClock(time.time())
    data_dir = Path(tempfile.mkdtemp(prefix="gpupool-mixed-k8s-data-"))
    output_dir = Path(tempfile.mkdtemp(prefix="gpupool-mixed-k8s-out-"))
    built: list[tuple[System, TestClient]] = []
    stack = contextlib.ExitStack()
    if other == "local":  # the accounts single-user mode makes are throwaway ones
        stack.enter_context(throwaway_accounts(monkeypatch))

    def make() -> Pool:
        if built:  # a restart: the running work keeps running
            system, client = built[-1]
            client.__exit__(None, None, None)
            system.stop()
        store = open_store(url)
        if not built:
            seed_members(store, clock.now(), limit=8)
        k8s = KubernetesEngine(KubeOptions(), api_client=kube.client())
        settings = SystemSettings(
            server=Settings(database_url=url, start_loops=False), data_dir=data_dir
        )
        engines = [k8s, _other_engine(other, output_dir)]
        system = build_system(settings, engines, clock=clock, store=store)
        client = TestClient(system.app, raise_server_exceptions=False)
        client.__enter__()
        built.append((system, client))
        tokens = {n: issue_token(system.ctx, n, "t", None).token for n in ("slann", "slbob")}
        return Pool(system, client, clock, tokens, kube=kube, other=other)

    try:
        yield make
    finally:
        for i, (system, client) in enumerate(built):
            if i == len(built) - 1:
                with system.ctx.store.read() as s:
                    active = [r.workload.id for r in WorkloadRepo(s).list() if r.workload.active]
                for wid in active:
                    system.executor.stop(wid, "test over", 0.0)
                    if other == "slurm":
                        subprocess.run(["scancel", "--name", f"gpupool-{wid}"], check=False)
                client.__exit__(None, None, None)
                system.stop()
            assert system.engines is not None
            local = system.engines.executors.get("local")
            if isinstance(local, LocalExecutor):
                end_all(local)
            system.ctx.store.close()
        stack.close()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(output_dir, ignore_errors=True)


def test_pinned_and_unpinned_work_runs_on_each_engine_and_a_gang_stays_on_one(pool, markers):
    p = pool()
    other = p.other
    labels = p.nodes()
    for name in K8S_NODES:
        assert labels[name][ENGINE_LABEL] == "kubernetes"
        assert labels[name][MULTI_NODE_LABEL] == "true"  # the engine runs gangs
    (other_node,) = set(labels) - set(K8S_NODES)
    assert labels[other_node][ENGINE_LABEL] == other
    # the local engine runs no multi-node work; Slurm does
    assert labels[other_node].get(MULTI_NODE_LABEL) == ("true" if other == "slurm" else None)

    # pinned: one job of slann's on each engine
    on_k8s = p.submit("slann", gpus=1, command=marked(markers), engine="kubernetes")
    on_other = p.submit("slann", gpus=1, command=marked(markers), engine=other)
    p.schedule()
    p.settle("slann", on_k8s, {"running"})
    p.settle("slann", on_other, {"running"})
    assert (p.engine_of(on_k8s), p.engine_of(on_other)) == ("kubernetes", other)
    (pod,) = p.pods(on_k8s)
    assert pod["metadata"]["namespace"] == LAB  # the tenant's namespace
    assert pod["spec"]["nodeName"] == p.nodes_of(on_k8s)[0]
    assert pod["status"]["phase"] == "Running"
    assert p.pods(on_other) == []  # the other engine's work is no pod
    wait_for(lambda: starts(markers, on_other) == 1, "the other engine's job to start")
    assert starts(markers, on_k8s) == 0  # nothing but the (fake) kubelet ran the pod

    # unpinned: as many one-GPU jobs of slbob's as there are free GPUs fill both engines
    free = {"kubernetes": 3, other: GPUS[other] - 1}
    unpinned = [
        p.submit("slbob", gpus=1, command=marked(markers)) for _ in range(sum(free.values()))
    ]
    p.schedule()
    for wid in unpinned:
        p.settle("slbob", wid, {"running"})
    assert collections.Counter(p.engine_of(wid) for wid in unpinned) == free
    for wid in unpinned:
        if p.engine_of(wid) == "kubernetes":
            (pod,) = p.pods(wid)
            assert pod["metadata"]["namespace"] == OTHER
        else:
            wait_for(lambda wid=wid: starts(markers, wid) == 1, f"{wid} to start")
    for wid in unpinned:
        p.cancel("slbob", wid)
    for wid in unpinned:
        p.settle("slbob", wid, {"cancelled"})
    assert all(p.pods(wid) == [] for wid in unpinned)

    # a gang of two nodes: the Kubernetes node without slann's job is taken whole, so the
    # only room for two nodes is across the engines (one Kubernetes GPU + the other engine's)
    blocker = p.submit("slann", gpus=2, command=marked(markers), engine="kubernetes")
    p.schedule()
    p.settle("slann", blocker, {"running"})
    assert {p.nodes_of(blocker)[0], p.nodes_of(on_k8s)[0]} == set(K8S_NODES)
    gang = p.submit("slann", nodes=2, gpus_per_node=1, command=marked(markers))
    p.schedule()
    p.kubelet()
    p.reconcile()
    waiting = p.get("slann", gang)
    assert waiting["state"] == "pending", waiting
    assert "needs 2 nodes on one engine" in waiting["pending"]["reason"], waiting
    assert p.pods(gang) == [] and starts(markers, gang) == 0
    p.cancel("slann", blocker)
    p.settle("slann", blocker, {"cancelled"})
    p.schedule()
    p.settle("slann", gang, {"running"})
    assert sorted(p.nodes_of(gang)) == list(K8S_NODES)
    assert p.engine_of(gang) == "kubernetes"
    pods = p.pods(gang)
    assert sorted(x["spec"]["nodeName"] for x in pods) == list(K8S_NODES)
    assert {x["metadata"]["namespace"] for x in pods} == {LAB}
    assert starts(markers, gang) == 0  # no part of it on the other engine


def test_a_guarantee_reclaims_on_kubernetes_and_restarts_adopt_both_engines(pool, markers):
    p = pool()
    other = p.other
    # slbob (guaranteed 1) borrows all four Kubernetes GPUs; each engine also runs a job of his
    bob = [
        p.submit("slbob", gpus=1, command=marked(markers), engine="kubernetes") for _ in range(4)
    ]
    bob_other = p.submit("slbob", gpus=1, command=marked(markers), engine=other)
    p.schedule()
    for wid in [*bob, bob_other]:
        p.settle("slbob", wid, {"running"})
    assert {p.engine_of(wid) for wid in bob} == {"kubernetes"}
    wait_for(lambda: starts(markers, bob_other) == 1, "the other engine's job to start")
    uids = {wid: p.pods(wid)[0]["metadata"]["uid"] for wid in bob}
    p.clock.advance(p.system.ctx.settings.scheduler.min_runtime_s + 1)

    # slann (lab, within its guarantee of 2) wants a Kubernetes GPU and one on the other engine
    ann = p.submit("slann", gpus=1, command=marked(markers), engine="kubernetes")
    ann_other = p.submit("slann", gpus=1, command=marked(markers), engine=other)
    p.schedule()  # ann_other starts at once: its engine has room
    p.clock.advance(p.system.ctx.settings.scheduler.reclaim_after_s)
    p.schedule()
    stopping = [wid for wid in bob if _has(p.get("slbob", wid), "workload.stopping")]
    assert len(stopping) == 1, stopping  # one borrowed GPU, on the engine it is needed on
    (victim,) = stopping
    (vpod,) = p.pods(victim)
    assert vpod["metadata"]["namespace"] == OTHER and vpod["metadata"].get("deletionTimestamp")
    assert [d[:2] for d in p.kube.deletes] == [(OTHER, vpod["metadata"]["name"])]
    creates = p.pod_creates()

    # restart 1: while the victim's pod is being deleted and ann_other is starting
    p = pool()
    back = p.settle("slbob", victim, {"pending"})  # the pod ended; back in the queue
    assert back["preemptions"] == 1 and not _has(back, "workload.lost"), back
    assert p.pods(victim) == []
    p.schedule()  # ann's pod is created; the kubelet has not run it yet
    (apod,) = p.pods(ann)
    assert apod["metadata"]["namespace"] == LAB and apod["status"]["phase"] == "Pending"
    assert p.pod_creates() == creates + 1

    # restart 2: while ann's pod is Pending
    running = {wid: "slbob" for wid in bob if wid != victim} | {bob_other: "slbob"}
    running |= {ann: "slann", ann_other: "slann"}
    restart = p.clock.now()
    p = pool()
    p.reconcile()  # before the kubelet runs it: the adopted Pending pod is left to start
    assert p.get("slann", ann)["state"] == "starting" and len(p.pods(ann)) == 1
    for wid, user in running.items():
        got = p.settle(user, wid, {"running"})
        after = {e["kind"] for e in got["events"] if e["at"] >= restart}
        assert not after & {"workload.lost", "workload.requeued", "workload.stopping"}, after
    assert (p.engine_of(ann), p.engine_of(ann_other)) == ("kubernetes", other)
    on_k8s = [wid for wid in running if p.engine_of(wid) == "kubernetes"]
    on_other = [bob_other, ann_other]
    assert {wid: [x["metadata"]["uid"] for x in p.pods(wid)] for wid in on_k8s} == {
        wid: [uids.get(wid, apod["metadata"]["uid"])] for wid in on_k8s
    }  # the same pods, adopted
    assert p.pod_creates() == creates + 1  # no pod made twice
    assert [d[:2] for d in p.kube.deletes] == [(OTHER, vpod["metadata"]["name"])]
    wait_for(lambda: all(starts(markers, w) == 1 for w in on_other), "the other engine's jobs")
    if other == "slurm":
        assert all(len(_slurm_jobs(wid)) == 1 for wid in on_other)  # one Slurm job each
    p.schedule()  # the victim is pinned to Kubernetes, whose GPUs are all taken again
    assert p.get("slbob", victim)["state"] == "pending" and p.pods(victim) == []

    # the adopted work is under the new system's control: a cancel deletes ann's pod, and
    # the requeued victim takes the GPU (a new pod of its own)
    p.cancel("slann", ann)
    p.settle("slann", ann, {"cancelled"})
    assert p.pods(ann) == []
    p.schedule()
    p.settle("slbob", victim, {"running"})
    (again,) = p.pods(victim)
    assert again["metadata"]["namespace"] == OTHER
    assert again["metadata"]["uid"] != vpod["metadata"]["uid"]
    assert p.pod_creates() == creates + 2
    assert all(starts(markers, wid) == 1 for wid in on_other)  # nothing ran twice


def up(kubeconfig: Path, data_dir: Path, port: int) -> GpupoolUp:
    """A real `gpupool up --engine kubernetes --engine local` (the fake API server through a
    kubeconfig, two simulated GPUs), its loops and the engine's watches running."""
    return GpupoolUp(
        ["--engine", "kubernetes", "--engine", "local", "--kubeconfig", str(kubeconfig),
         "--simulate", "2xH100-80GB", "--node-name", LOCAL_NODE, "--user-mode", "per-user",
         "--mps", "off", "--data-dir", str(data_dir), "--no-jupyterhub", "--workers", "0"],
        port, PASSWORD,
    )  # fmt: skip


def test_kill_9_of_gpupool_up_over_kubernetes_and_local_loses_nothing(kube, markers):
    """The same pool from the command line: watches wake the loops (no loop driven by hand);
    `kill -9` while pods and processes run, then a restart adopts both."""
    for name in K8S_NODES:
        kube.add_node(name, 2, labels=GFD)
    data = Path(tempfile.mkdtemp(prefix="gpupool-mixed-k8s-up-"))
    kubeconfig = data / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    port = free_port()
    ups = [up(kubeconfig, data, port)]
    wids: list[str] = []
    try:
        ups[0].wait_ready()
        h = ups[0].login()
        said = "".join(ups[0].lines)
        assert "2 engines in one pool: kubernetes, local (default kubernetes)" in said, said
        url = ups[0].url + API
        nodes = httpx.get(f"{url}/nodes", headers=h).json()
        engines = {n["name"]: n["labels"][ENGINE_LABEL] for n in nodes}
        assert engines == {"k8s-a": "kubernetes", "k8s-b": "kubernetes", LOCAL_NODE: "local"}
        # per-user mode: the admin's local jobs run as an existing unprivileged account
        r = httpx.patch(f"{url}/users/admin", headers=h, json={"unix_user": "nobody"})
        assert r.status_code == 200, r.text

        def submit(engine: str) -> str:
            body = {"gpus": 1, "command": marked(markers), "engine": engine}
            r = httpx.post(f"{url}/workloads", headers=h, json=body)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        def all_in(state: str, these: list[str]) -> bool:
            kubelet(kube)
            got = [httpx.get(f"{url}/workloads/{x}", headers=h).json() for x in these]
            return all(w["state"] == state for w in got)

        wids = [submit(e) for e in ("kubernetes", "kubernetes", "local", "local")]
        wait_for(lambda: all_in("running", wids), "all running", timeout=60)
        uids = {x: [p["metadata"]["uid"] for p in kube.pods_of(f"{WORKLOAD}={x}")] for x in wids}
        assert [len(u) for u in uids.values()] == [1, 1, 0, 0], uids
        assert {kube.pod(NS, f"gp-{x}")["spec"]["nodeName"] for x in wids[:2]} <= set(K8S_NODES)
        wait_for(lambda: all(starts(markers, x) == 1 for x in wids[2:]), "local jobs started")
        creates = pod_creates(kube)

        ups[0].proc.send_signal(signal.SIGKILL)  # pods and processes run on both engines
        ups[0].proc.wait(30)
        ups.append(up(kubeconfig, data, port))
        ups[1].wait_ready()
        h = ups[1].login()
        late = submit("kubernetes")  # runs once the loops have passed over the old work
        wait_for(lambda: all_in("running", [late]), "a job after the restart to run", timeout=60)
        for wid in wids:
            got = httpx.get(f"{url}/workloads/{wid}", headers=h).json()
            assert got["state"] == "running", got
            kinds = {e["kind"] for e in got["events"]}
            assert not kinds & {"workload.lost", "workload.requeued"}, kinds
        now = {x: [p["metadata"]["uid"] for p in kube.pods_of(f"{WORKLOAD}={x}")] for x in wids}
        assert now == uids  # the same pods
        assert pod_creates(kube) == creates + 1 and kube.deletes == []  # only the late one's
        assert all(starts(markers, x) == 1 for x in wids[2:])  # nothing ran twice
        wids.append(late)
        for wid in wids:
            assert httpx.delete(f"{url}/workloads/{wid}", headers=h).status_code in (200, 202)
        wait_for(lambda: all_in("cancelled", wids), "all cancelled", timeout=60)
        assert kube.pods_of(SELECTOR) == []
    finally:
        for each in ups:
            end_process(each.proc)
        shutil.rmtree(data, ignore_errors=True)


def _has(workload: dict, kind: str) -> bool:
    return any(e["kind"] == kind for e in workload["events"])


def _slurm_jobs(wid: str) -> list[str]:
    """Ids of every Slurm job named for the workload (squeue keeps ended ones a while)."""
    from tests.slurm.conftest import sh

    return sh("squeue", "-h", "-t", "all", "--name", f"gpupool-{wid}", "-o", "%i").split()
