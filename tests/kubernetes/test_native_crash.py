"""`kill -9` of a real `gpupool up --engine kubernetes` (webhook on) while kubectl-applied
Pods and a Job are queued: some released, the rest gated or suspended. The fake API server
(tests/kubernetes/fakeapi.py) calls the webhook over HTTPS; the test plays kube-scheduler,
the kubelet and the job controller, and only after the restart. After the restart every
object is released exactly once (one PATCH each: affinity and gate / suspend together), its
node affinity names the node of gpupool's stored allocation, nothing is half-admitted at the
kill or after it, nothing is lost, and each object is one workload in gpupool."""

from __future__ import annotations

import collections
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.podstatus import node_of
from gpupool.store import AllocationRepo, WorkloadRepo, open_store
from tests.kubernetes.test_native import GFD, _job, _kubectl, _pod
from tests.support import GpupoolUp, free_port, wait_for

NS = "gpupool-default"
API = "/api/v1"
PASSWORD = "native crash password"
PODS = ("pod-a", "pod-b", "pod-c")
JOB = "train"
pytestmark = pytest.mark.slow


def _up(kubeconfig: Path, data_dir: Path, port: int, hook_port: int) -> GpupoolUp:
    """A real `gpupool up --engine kubernetes` with its admission webhook on `hook_port`."""
    return GpupoolUp(
        ["--engine", "kubernetes", "--kubeconfig", str(kubeconfig),
         "--kubernetes-webhook-port", str(hook_port),
         "--kubernetes-webhook-service", "127.0.0.1",
         "--data-dir", str(data_dir), "--no-jupyterhub", "--workers", "0"],
        port,
        PASSWORD,
    )  # fmt: skip


def _objects(kube) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> the queued object as the fake stores it (a Job's pods left out)."""
    with kube.lock:
        out = {("Pod", n): {"kind": "Pod", **kube.pod(NS, n)} for n in PODS}
        out[("Job", JOB)] = {"kind": "Job", **kube.native.job(NS, JOB)}
    return out


def _pinned(obj: dict[str, Any]) -> str | None:
    spec = native.pod_spec_of(obj)
    return node_of({"spec": {"affinity": spec["affinity"]}}) if spec.get("affinity") else None


def _releases(kube, kind: str, name: str) -> int:
    path = {
        "Pod": f"/api/v1/namespaces/{NS}/pods/{name}",
        "Job": f"/apis/batch/v1/namespaces/{NS}/jobs/{name}",
    }[kind]
    return sum(1 for m, p in kube.requests if m == "PATCH" and p == path)


def _stored(data: Path) -> tuple[list[Any], dict[str, Any]]:
    """gpupool's stored workloads and each one's latest allocation (None: never admitted)."""
    store = open_store(f"sqlite:///{data}/gpupool.db")
    try:
        with store.read() as s:
            rows = [r.workload for r in WorkloadRepo(s).list()]
            return rows, {w.id: AllocationRepo(s).last_for(w.id) for w in rows}
    finally:
        store.close()


def _kubelet(kube) -> None:
    """kube-scheduler, the kubelet and the job controller: a released object runs on the
    node its affinity names and succeeds at once."""
    for (kind, name), obj in _objects(kube).items():
        if native.held(obj):
            continue
        if kind == "Job":
            if not obj["status"].get("conditions"):
                kube.native.job_controller(NS, name)
                kube.native.finish_job(NS, name)
        elif obj["status"].get("phase") == "Pending":
            kube.set_phase(NS, name, "Running", node=_pinned(obj))
            kube.set_phase(NS, name, "Succeeded", exit_code=0)


def test_kill_9_between_admissions_leaves_nothing_half_admitted(kube):
    kube.add_node("gpu-1", 1, labels=GFD)  # one GPU: one object admitted at a time
    data = Path(tempfile.mkdtemp(prefix="gpupool-native-crash-"))
    kubeconfig = data / "kubeconfig"
    kube.kubeconfig(kubeconfig)
    port, hook_port = free_port(), free_port()
    # the chart's MutatingWebhookConfiguration, its caBundle empty: gpupool sets it
    kube.native.register_webhook(f"https://127.0.0.1:{hook_port}/mutate", b"")
    ups = [_up(kubeconfig, data, port, hook_port)]
    try:
        ups[0].wait_ready()
        core, batch = _kubectl(kube)
        batch.create_namespaced_job(NS, _job(JOB, 1, 1))
        for name in PODS:
            core.create_namespaced_pod(NS, _pod(name, 1))
        queued = _objects(kube)
        wids = {k: o["metadata"]["labels"][native.NATIVE] for k, o in queued.items()}
        assert len(set(wids.values())) == 4, wids
        # every one went through the webhook gated / suspended (the scheduler may already
        # have released one: the Job is queued first)
        creates = [
            r["request"] for r in kube.native.reviews if r["request"]["operation"] == "CREATE"
        ]
        assert [r["kind"]["kind"] for r in creates] == ["Job"] + ["Pod"] * 3
        assert sum(not native.held(o) for o in queued.values()) <= 1

        def released() -> list[tuple[str, str]]:
            return [k for k, o in _objects(kube).items() if not native.held(o)]

        wait_for(released, "a first admission", timeout=30)
        ups[0].proc.send_signal(signal.SIGKILL)
        ups[0].proc.wait(30)
        at_kill = _objects(kube)
        first = [k for k, o in at_kill.items() if not native.held(o)]
        assert len(first) == 1, first  # one GPU: the rest still wait
        for key, obj in at_kill.items():  # nothing half-admitted: pinned iff released
            assert (_pinned(obj) is None) == native.held(obj), (key, obj)
        rows, allocs = _stored(data)  # what the killed server had stored
        admitted = {w.id for w in rows if allocs[w.id] is not None}
        assert admitted == {wids[k] for k in first}, (admitted, first)
        assert allocs[wids[first[0]]][0].nodes == (_pinned(at_kill[first[0]]),)

        ups.append(_up(kubeconfig, data, port, hook_port))
        ups[1].wait_ready()
        h = ups[1].login()

        def all_done() -> bool:
            _kubelet(kube)
            got = [
                httpx.get(f"{ups[1].url}{API}/workloads/{w}", headers=h).json()
                for w in wids.values()
            ]
            return all(w["state"] == "succeeded" for w in got)

        wait_for(all_done, "every object to be admitted and succeed", timeout=40)
        rows, nodes = _stored(data)
        per_object = collections.Counter(w.command for w in rows if w.command[0] == "kubectl")
        assert per_object == collections.Counter(
            ("kubectl", kind, NS, name) for kind, name in wids
        )  # each queued object is one workload, none lost, none twice
        for key, obj in _objects(kube).items():
            kind, name = key
            assert not native.held(obj), key
            assert _releases(kube, kind, name) == 1, key  # released exactly once
            alloc = nodes[wids[key]]
            assert alloc is not None, key  # no release without a stored admission
            assert alloc[0].nodes == (_pinned(obj),), (key, alloc)
            terms = native.pod_spec_of(obj)["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert [t["matchExpressions"] for t in terms] == [
                [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}]
            ]
        for wid in wids.values():
            got = httpx.get(f"{ups[1].url}{API}/workloads/{wid}", headers=h).json()
            kinds = {e["kind"] for e in got["events"]}
            assert not kinds & {"workload.lost", "workload.requeued"}, (wid, kinds)
    finally:
        for up in ups:
            up.stop()
        shutil.rmtree(data, ignore_errors=True)
