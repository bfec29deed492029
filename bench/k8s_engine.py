"""Kubernetes engine speed against the fake API server (tests/kubernetes/fakeapi.py) over
real HTTP, through the official client. Targets (issue 15):

1. admission decision -> pod created: one scheduler pass that admits one job and creates
   its pod (`build_system` with the kubernetes engine), <= 100 ms;
2. one reconcile pass over 5,000 pods: the executor's list of gpupool's pods, a poll of
   each workload and `list_running` (what the reconciler asks the executor per pass), and
   then the whole reconciler pass over 5,000 running workloads in the store, <= 2 s;
3. with the server's loops running by themselves (real intervals: reconciler 2 s,
   inventory 10 s), `--watch` off and on: API requests per minute while idle (one running
   pod, nothing changing), and event -> state latency: a pod set Running in the fake API
   server until the workload reads `running` in the store.

The fake API server runs in this process (its JSON encoding of 5,000 pods is included in
the times: a real API server does that work on another machine).

    PYTHONPATH=src python bench/k8s_engine.py [--jobs 100] [--pods 5000] [--idle-s 60]
        [--events 20] [--out FILE]
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

from gpupool.clock import ManualClock, SystemClock  # noqa: E402
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine  # noqa: E402
from gpupool.server.services.accounts import issue_token  # noqa: E402
from gpupool.server.settings import Settings  # noqa: E402
from gpupool.system import SystemSettings, build_system  # noqa: E402


def _system(  # noqa: ANN202
    kube: FakeKube, tmp: Path, name: str, *, loops: bool = False, watch: bool = True
):
    db = f"sqlite:///{tmp / name}"
    s = SystemSettings(server=Settings(database_url=db, start_loops=loops), admin="admin")
    system = build_system(
        s,
        # pods left Pending through the idle minute must not be given up meanwhile
        KubernetesEngine(
            KubeOptions(watch=watch, pending_timeout_s=3600.0), api_client=kube.client()
        ),
        clock=SystemClock() if loops else ManualClock(1_780_000_000.0),
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
        engine = system.engine
        engine.follow(lambda loop: None)  # now from the watches' caches
        _wait(lambda: all(i.synced for i in engine.watches.values()), 120)
        _wait(lambda: kube.watch.opened >= len(engine.watches), 30)
        before = len(kube.requests)
        t0 = time.perf_counter()
        ex.tick()
        for wid in ids:
            ex.poll(wid)
        assert len(ex.list_running()) == pods
        out["executor_pass_watch_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = rec.run_once()
        out["reconciler_pass_watch_s"] = time.perf_counter() - t0
        assert not report.changed, report.changed
        assert len(kube.requests) == before, kube.requests[before:]
    finally:
        system.stop()
        kube.stop()
    return out


def _wait(check, limit_s: float = 30.0) -> float:  # noqa: ANN001
    """Seconds until `check()` holds (polled every 2 ms)."""
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > limit_s:
            raise TimeoutError("the state did not follow")
        time.sleep(0.002)
    return time.perf_counter() - t0


def idle_and_latency(watch: bool, idle_s: float, events: int, tmp: Path) -> dict[str, float]:
    """Requests per minute idle, and event -> state latencies, with the loops running."""
    kube = FakeKube().start()
    kube.add_node("gpu-1", events + 1, labels={"nvidia.com/gpu.product": "H100"})
    system, client = _system(kube, tmp, f"idle-{watch}.db", loops=True, watch=watch)
    out: dict[str, float] = {}
    try:
        with client:  # the lifespan starts the loops
            ids = []
            for _ in range(events + 1):
                r = client.post(
                    "/api/v1/workloads", json={"gpus": 1, "command": ["true"], "tenant": "default"}
                )
                ids.append(r.json()["id"])

            def state(wid: str) -> str:
                return client.get(f"/api/v1/workloads/{wid}").json()["state"]

            _wait(lambda: len(kube.pods) == len(ids))
            pods = {p["metadata"]["labels"]["gpupool.dev/workload"]: p for p in kube.pods_of()}
            _wait(lambda: all(state(w) == "starting" for w in ids))
            first = pods[ids[0]]["metadata"]
            kube.set_phase(first["namespace"], first["name"], "Running", node="gpu-1")
            _wait(lambda: state(ids[0]) == "running")
            time.sleep(3)  # let the passes that were due run
            before = len(kube.requests)
            time.sleep(idle_s)
            idle = [r for r in kube.requests[before:]]
            out["idle_per_min"] = len(idle) * 60.0 / idle_s
            lat = []
            for wid in ids[1:]:
                meta = pods[wid]["metadata"]
                kube.set_phase(meta["namespace"], meta["name"], "Running", node="gpu-1")
                lat.append(_wait(lambda w=wid: state(w) == "running"))
            out["lat_p50_ms"] = statistics.median(lat) * 1000
            out["lat_max_ms"] = max(lat) * 1000
            out["lat_mean_ms"] = statistics.mean(lat) * 1000
    finally:
        system.stop()
        kube.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--skip-scale", action="store_true", help="only the idle/latency part")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as d:
        for watch in (False, True):
            r = idle_and_latency(watch, a.idle_s, a.events, Path(d))
            lines.append(
                f"watch {'on ' if watch else 'off'}: {r['idle_per_min']:.1f} API requests/min "
                f"idle; pod Running -> workload running ({a.events} pods): "
                f"p50 {r['lat_p50_ms']:.0f} ms, mean {r['lat_mean_ms']:.0f} ms, "
                f"max {r['lat_max_ms']:.0f} ms"
            )
            print(lines[-1], flush=True)
        if a.skip_scale:
            if a.out:
                a.out.write_text("\n".join(lines) + "\n")
            return
        lat = admission_latency(a.jobs, Path(d))
        p50 = statistics.median(lat) * 1000
        p95 = sorted(lat)[int(len(lat) * 0.95) - 1] * 1000
        lines += [
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
        lines.append(
            f"{a.pods} pods from the watches' caches (no request): executor pass "
            f"{r['executor_pass_watch_s']:.2f} s; whole reconciler pass "
            f"{r['reconciler_pass_watch_s']:.2f} s"
        )
        print(lines[-1], flush=True)
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
