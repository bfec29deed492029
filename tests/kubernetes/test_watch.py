"""Watches (engines/kubernetes/watch.py) against the fake API server's `?watch=true` streams:
transitions seen through the watch, 410 Gone in the middle recovered by a re-list with no
lost or repeated change, stream errors with backoff, the periodic resync, and the engine
woken by changes (nodes NotReady, pods deleted behind gpupool's back) with no request per
pass."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload
from gpupool.engines.common.executor import ExecState
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.engines.kubernetes.manifests import SELECTOR
from gpupool.engines.kubernetes.watch import Informer
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo
from gpupool.system import SystemSettings, build_system
from tests.support import wait_for

NS = "gpupool-default"
GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}


def _pod(name: str, ns: str = NS, managed: bool = True) -> dict:
    labels = {"app.kubernetes.io/managed-by": "gpupool"} if managed else {}
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }


class Seen:
    """on_change calls, thread-safe: (type, name, phase, resourceVersion)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, str, str, str]] = []

    def __call__(self, kind: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        phase = (obj.get("status") or {}).get("phase", "")
        with self.lock:
            self.items.append((kind, meta.get("name", ""), phase, meta.get("resourceVersion")))

    def of(self, name: str) -> list[tuple[str, str]]:
        with self.lock:
            return [(k, p) for k, n, p, _ in self.items if n == name]


@pytest.fixture
def informer(kube, api, clock):
    seen = Seen()
    inf = Informer(
        "pods",
        lambda: api.list_pods_at(SELECTOR),
        api.core.list_pod_for_all_namespaces,
        clock,
        selectors={"label_selector": SELECTOR},
        on_change=seen,
        backoff_s=0.01,
        max_backoff_s=0.05,
    )
    inf.seen = seen
    kube.add_namespace(NS, "default")
    yield inf
    inf.stop()
    kube.end_watches()


def _phase(inf: Informer, name: str) -> str | None:
    for p in inf.snapshot() or []:
        if p["metadata"]["name"] == name:
            return p["status"]["phase"]
    return None


def _watching(kube, n: int = 1):
    return wait_for(lambda: kube.watch.opened >= n and kube.watch._waiters, "a watch open")


def test_pending_running_succeeded_is_seen_through_the_watch(kube, informer):
    informer.start()
    _watching(kube)
    kube.add_pod(_pod("a"))
    kube.add_pod(_pod("other", managed=False))  # outside the selector: never seen
    wait_for(lambda: _phase(informer, "a") == "Pending", "the pod added")
    kube.set_phase(NS, "a", "Running", node="n1")
    wait_for(lambda: _phase(informer, "a") == "Running", "the pod running")
    kube.set_phase(NS, "a", "Succeeded", exit_code=0)
    wait_for(lambda: _phase(informer, "a") == "Succeeded", "the pod done")
    assert informer.seen.of("a") == [
        ("ADDED", "Pending"),
        ("MODIFIED", "Running"),
        ("MODIFIED", "Succeeded"),
    ]
    assert informer.seen.of("other") == []
    assert informer.stats.lists == 1 and informer.stats.gone == 0  # no list after the first
    assert [m for m, _ in kube.requests].count("GET") == 1


def test_410_in_the_middle_relists_with_no_lost_or_repeated_change(kube, informer):
    kube.add_pod(_pod("a"))
    kube.add_pod(_pod("b"))
    informer.start()
    _watching(kube)
    kube.set_phase(NS, "a", "Running", node="n1")
    wait_for(lambda: _phase(informer, "a") == "Running", "a running")
    kube.watch.pause()  # the watcher falls behind ...
    kube.set_phase(NS, "a", "Succeeded", exit_code=0)
    kube.vanish(NS, "b")
    kube.add_pod(_pod("c"))
    kube.watch.compact()  # ... and the server forgets what it missed: its next watch gets 410
    kube.watch.resume()
    wait_for(lambda: informer.stats.gone == 1 and informer.stats.lists == 2, "a re-list")
    wait_for(lambda: _phase(informer, "c") == "Pending", "c after the re-list")
    assert _phase(informer, "a") == "Succeeded" and _phase(informer, "b") is None
    assert informer.seen.of("a") == [
        ("ADDED", "Pending"),
        ("MODIFIED", "Running"),
        ("MODIFIED", "Succeeded"),
    ]
    assert informer.seen.of("b") == [("ADDED", "Pending"), ("DELETED", "Pending")]
    assert informer.seen.of("c") == [("ADDED", "Pending")]
    kube.set_phase(NS, "c", "Running", node="n1")  # and it watches on from the new list
    wait_for(lambda: _phase(informer, "c") == "Running", "c running via the new watch")
    assert informer.stats.lists == 2


def test_stream_errors_back_off_and_relist(kube, informer):
    informer.start()
    _watching(kube)
    kube.watch.fail_watches(2)
    kube.end_watches()  # the stream drops; the next two watches answer 500
    wait_for(lambda: informer.stats.errors == 2, "two failed watches")
    kube.add_pod(_pod("a"))
    wait_for(lambda: _phase(informer, "a") == "Pending", "the pod after recovery")
    assert informer.stats.lists >= 2  # listed again after each error


def test_a_full_resync_comes_every_resync_s_on_the_clock(kube, informer, clock):
    informer.resync_s = 600
    informer.start()
    _watching(kube)
    kube.end_watches()  # a watch that ends normally is re-opened, no list
    _watching(kube, 2)
    assert informer.stats.lists == 1
    clock.advance(601)
    kube.end_watches()
    wait_for(lambda: informer.stats.lists == 2, "the resync's list")
    assert informer.stats.gone == 0


def test_a_pod_not_yet_in_the_watch_is_not_lost(kube, api, clock):
    """A pod created a moment ago that the watch has not shown yet is read, not declared
    lost; once it is really gone it is."""
    cache: list[dict] = []
    ex = KubernetesExecutor(
        api, clock, allocatable=lambda n: ({"nvidia.com/gpu": "8"}, 1), cache=lambda: cache
    )
    w = Workload("w1", "default", "ann", Request(gpus=1), command=("true",))
    share = Share("n1", 0, "k8s:n1:0", 1000, 81920, Enforcement.HARDWARE)
    ex.start(w, Allocation("w1", "n1", (share,), 0.0))
    ex.tick()
    assert ex.poll("w1").state is ExecState.STARTING
    pod_reads = [(m, p) for m, p in kube.requests if m == "GET" and "/pods" in p]
    assert len(pod_reads) == 1  # the one read, no list
    kube.vanish(NS, "gp-w1")
    ex.tick()
    assert ex.poll("w1").state is ExecState.LOST


# -- the engine in a system ------------------------------------------------------------------


@pytest.fixture
def watched(kube, clock, tmp_path):
    kube.add_node("gpu-1", 2, labels=GFD)
    engine = KubernetesEngine(KubeOptions(), api_client=kube.client())
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    s = SystemSettings(server=Settings(database_url=db, start_loops=False), admin="admin")
    system = build_system(s, engine, clock=clock)
    woken = Seen()
    engine.follow(lambda loop: woken(loop, {}))  # what a serving system does
    wait_for(lambda: all(i.synced for i in engine.watches.values()), "the watches listed")
    system.woken = woken
    try:
        yield system
    finally:
        system.stop()
        kube.end_watches()


def _reconciled(ctx) -> bool:
    ctx.loops.get("reconciler").run_once()
    return True


def _loops_woken(system) -> list[str]:
    with system.woken.lock:
        return [k for k, *_ in system.woken.items]


def _client(system):
    token = issue_token(system.ctx, "admin", "test", None).token
    return TestClient(system.app, headers={"Authorization": f"Bearer {token}"})


def _submit_one(system, kube):
    """A 1-GPU job submitted and scheduled: (client, workload id, its pod)."""
    client = _client(system)
    r = client.post("/api/v1/workloads", json={"gpus": 1, "command": ["true"], "tenant": "default"})
    wid = r.json()["id"]
    system.ctx.loops.get("scheduler").run_once()
    (pod,) = kube.pods_of(f"gpupool.dev/workload={wid}")
    return client, wid, pod


def test_a_job_follows_its_pod_through_the_watch_with_no_request_per_pass(watched, kube):
    ctx = watched.ctx
    client, wid, pod = _submit_one(watched, kube)
    name = pod["metadata"]["name"]
    engine = watched.engine
    wait_for(lambda: engine.watches["pods"].snapshot(), "the new pod in the watch")
    before = len(kube.requests)
    kube.set_phase(NS, name, "Running", node="gpu-1")
    wait_for(lambda: "reconciler" in _loops_woken(watched), "the reconciler woken")
    wait_for(
        lambda: (
            _reconciled(ctx) and client.get(f"/api/v1/workloads/{wid}").json()["state"] == "running"
        ),
        "running",
    )
    kube.set_phase(NS, name, "Failed", exit_code=3)
    wait_for(
        lambda: (
            _reconciled(ctx) and client.get(f"/api/v1/workloads/{wid}").json()["state"] == "failed"
        ),
        "failed",
    )
    w = client.get(f"/api/v1/workloads/{wid}").json()
    assert w["exit_code"] == 3
    transitions = [e["kind"] for e in w["events"] if "to" in (e.get("data") or {})]
    assert transitions == [
        "workload.submitted",
        "workload.admitted",
        "workload.starting",
        "workload.running",
        "workload.failed",
    ]
    for _ in range(5):
        ctx.loops.get("reconciler").run_once()
        ctx.loops.get("inventory").run_once()
    assert kube.requests[before:] == []  # passes read the watches' caches


def test_a_node_going_notready_is_seen_via_the_watch(watched, kube, clock):
    ctx = watched.ctx
    loop = ctx.loops.get("inventory")
    loop.run_once()
    lists = len(kube.requests)
    kube.set_node_ready("gpu-1", False)
    wait_for(lambda: watched.engine.inventory_due(), "the inventory due")
    assert "inventory" in _loops_woken(watched)
    assert loop.run_once() == ["gpu-1"]  # at once, not on the 10 s interval
    with ctx.store.read() as s:
        (node,) = NodeRepo(s).list()
    assert node.state.value == "down"
    assert len(kube.requests) == lists


def test_a_pod_deleted_behind_gpupools_back_is_lost_via_the_watch(watched, kube):
    ctx = watched.ctx
    client, wid, pod = _submit_one(watched, kube)
    kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1")
    wait_for(
        lambda: (
            _reconciled(ctx) and client.get(f"/api/v1/workloads/{wid}").json()["state"] == "running"
        ),
        "running",
    )
    kube.vanish(NS, pod["metadata"]["name"])
    wait_for(lambda: not watched.engine.watches["pods"].snapshot(), "the deletion seen")
    ctx.loops.get("reconciler").run_once()
    w = client.get(f"/api/v1/workloads/{wid}").json()
    assert w["state"] == "lost" and "deleted outside gpupool" in w["reason"]
    assert [e["kind"] for e in w["events"]].count("workload.lost") == 1
