"""Kubernetes engine speed against the fake API server (tests/kubernetes/fakeapi.py) over
real HTTP, through the official client. Targets (issue 15):

1. admission decision -> pod created: one scheduler pass that admits one job and creates
   its pod (`build_system` with the kubernetes engine), <= 100 ms;
2. one reconcile pass over 5,000 pods: the executor's list of gpupool's pods, a poll of
   each workload and `list_running` (what the reconciler asks the executor per pass), and
   then the whole reconciler pass over 5,000 running workloads in the store, <= 2 s.

The fake API server runs in this process (its JSON encoding of 5,000 pods is included in
the times: a real API server does that work on another machine).

    PYTHONPATH=src python bench/k8s_engine.py [--jobs 100] [--pods 5000] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402
from tests.kubernetes.fakeapi import FakeKube  # noqa: E402

from gpupool.clock import ManualClock  # noqa: E402
from gpupool.engines.kubernetes import KubeOptions, KubernetesEngine  # noqa: E402
from gpupool.server.services.accounts import issue_token  # noqa: E402
from gpupool.server.settings import Settings  # noqa: E402
from gpupool.system import SystemSettings, build_system  # noqa: E402


def _system(kube: FakeKube, tmp: Path, name: str):  # noqa: ANN202
    db = f"sqlite:///{tmp / name}"
    s = SystemSettings(server=Settings(database_url=db, start_loops=False), admin="admin")
    system = build_system(
        s,
        KubernetesEngine(KubeOptions(), api_client=kube.client()),
        clock=ManualClock(1_780_000_000.0),
    )
    token = issue_token(system.ctx, "admin", "bench", None).token
    return system, TestClient(system.app, headers={"Authorization": f"Bearer {token}"})


def admission_latency(jobs: int, tmp: Path) -> list[float]:
    kube = FakeKube().start()
    kube.add_node("gpu-1", jobs + 8, labels={"nvidia.com/gpu.product": "H100"})
    system, client = _system(kube, tmp, "admit.db")
    times = []
    try:
        sched = system.ctx.loops.get("scheduler")
        for _ in range(jobs):
            r = client.post(
                "/api/v1/workloads", json={"gpus": 1, "command": ["true"], "tenant": "default"}
            )
            assert r.status_code == 201, r.text
            wid = r.json()["id"]
            t0 = time.perf_counter()
            sched.run_once()
            times.append(time.perf_counter() - t0)
            assert kube.pods_of(f"gpupool.dev/workload={wid}"), "no pod was created"
    finally:
        system.stop()
        kube.stop()
    return times


def reconcile_pass(pods: int, tmp: Path) -> dict[str, float]:
    kube = FakeKube().start()
    nodes = pods // 8
    for i in range(nodes):
        kube.add_node(f"gpu-{i}", 8)
    system, client = _system(kube, tmp, "reconcile.db")
    out: dict[str, float] = {}
    try:
        ctx = system.ctx
        sched = ctx.loops.get("scheduler")
        t0 = time.perf_counter()
        ids = []
        for _ in range(pods):
            r = client.post(
                "/api/v1/workloads", json={"gpus": 1, "command": ["true"], "tenant": "default"}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        while sched.run_once() and len(kube.pods) < pods:
            pass
        sched.run_once()
        out["setup_s"] = time.perf_counter() - t0
        assert len(kube.pods) == pods, len(kube.pods)
        for (ns, name), pod in list(kube.pods.items()):
            kube.set_phase(
                ns,
                name,
                "Running",
                node=pod["spec"]["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
            )
        rec = ctx.loops.get("reconciler")
        rec.run_once()  # pods become running in the store
        ex = system.engine.executor
        t0 = time.perf_counter()
        ex.tick()
        for wid in ids:
            ex.poll(wid)
        running = ex.list_running()
        out["executor_pass_s"] = time.perf_counter() - t0
        assert len(running) == pods
        t0 = time.perf_counter()
        report = rec.run_once()
        out["reconciler_pass_s"] = time.perf_counter() - t0
        assert not report.changed, report.changed
    finally:
        system.stop()
        kube.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        lat = admission_latency(a.jobs, Path(d))
        p50 = statistics.median(lat) * 1000
        p95 = sorted(lat)[int(len(lat) * 0.95) - 1] * 1000
        lines = [
            f"admission -> pod created (one scheduler pass, {a.jobs} jobs): "
            f"p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(lat) * 1000:.1f} ms "
            f"(target <= 100 ms)",
        ]
        print(lines[-1], flush=True)
        r = reconcile_pass(a.pods, Path(d))
        lines.append(
            f"{a.pods} pods: executor pass (list + {a.pods} polls + list_running) "
            f"{r['executor_pass_s']:.2f} s; whole reconciler pass {r['reconciler_pass_s']:.2f} s "
            f"(target <= 2 s); setup {r['setup_s']:.0f} s"
        )
        print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
