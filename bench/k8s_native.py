"""Kubernetes-native work (issue 33) at cluster scale against the fake API server
(tests/kubernetes/fakeapi.py) over real HTTP, through the official client. Targets:

1. initial sync of every watch (nodes, live pods, gpupool's pods, queued pods, Jobs) with
   `--nodes` nodes and `--pods` pods in the cluster: <= 10 s;
2. `kubectl apply` latency through the webhook (HTTPS, the API's read-only checks of a
   submission), p50, and the reconciler pass that then queues the `--queued` stored
   objects from the watch (native_intake.py: verify each mark, submit);
3. decision -> gate removed: each native start (read by name, one release patch, one
   Event) timed inside a scheduler pass that admits `--queued` gated pods, p50 <= 100 ms;
4. a reconciler pass after one change (one queued pod set Running): <= 50 ms;
5. API requests per simulated minute at steady state (nothing changing: 30 reconciler and
   6 inventory passes on a manual clock, watches open), at `--pods` and at a tenth of it:
   the number must not grow with the pods.

The fake API server runs in this process (its JSON encoding and the watches' fan-out are in
the times: a real API server does that work on another machine).

    PYTHONPATH=src python bench/k8s_native.py [--nodes 5000] [--pods 50000] [--queued 200]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.kubernetes.fakeapi import FakeKube  # noqa: E402
from tests.kubernetes.test_native import NS, _build, _kubectl, _pod  # noqa: E402

from gpupool.clock import ManualClock  # noqa: E402
from gpupool.engines.kubernetes import native  # noqa: E402
from gpupool.store import WorkloadRepo  # noqa: E402

GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}


def _fill(kube: FakeKube, nodes: int, pods: int) -> None:
    """`nodes` 8-GPU nodes and `pods` running pods of other namespaces (no GPUs)."""
    for i in range(nodes):
        kube.add_node(f"gpu-{i}", 8, labels=GFD)
    kube.add_namespace("batch-ns")
    for i in range(pods):
        p = _pod(f"other-{i}", 0)
        p["metadata"]["namespace"] = "batch-ns"
        p["spec"]["nodeName"] = f"gpu-{i % nodes}"
        p["status"] = {"phase": "Running"}
        kube.add_pod(p)


def _wait_synced(engine, timeout: float = 120.0) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    engine.follow(lambda loop: None)
    while not all(w.synced for w in engine.watches.values()):
        if time.perf_counter() - t0 > timeout:
            raise SystemExit("the watches did not sync")
        time.sleep(0.01)
    return time.perf_counter() - t0


def _queued(system) -> int:  # noqa: ANN001
    with system.ctx.store.read() as s:
        return len(WorkloadRepo(s).rows())


def _say(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def run(nodes: int, pods: int, queued: int, tmp: Path) -> dict:
    kube = FakeKube().start()
    try:
        t0 = time.perf_counter()
        _fill(kube, nodes, pods)
        fill_s = time.perf_counter() - t0
        clock = ManualClock(1_780_000_000.0)
        _say(f"filled: {nodes} nodes, {pods} pods")
        system, engine = _build(kube, clock, tmp, watch=True)
        _say("system built")
        sync_s = _wait_synced(engine)
        _say(f"synced in {sync_s:.2f} s")
        core, _ = _kubectl(kube)
        applies = []
        for i in range(queued):
            t = time.perf_counter()
            core.create_namespaced_pod(NS, _pod(f"q-{i}", 1))
            applies.append(time.perf_counter() - t)
        _say(f"{queued} applied")
        deadline = time.perf_counter() + 30
        while (
            len(engine.watches["native-pods"].snapshot() or []) < queued
            and time.perf_counter() < deadline
        ):
            time.sleep(0.01)  # the watch sees the stored, gated pods
        t = time.perf_counter()
        intake_passes = 0
        while _queued(system) < queued:
            system.ctx.loops.get("reconciler").run_once()  # at most ~1 s of submits each
            intake_passes += 1
        intake_s = time.perf_counter() - t
        _say("queued by the watch")
        ex = engine.executor
        starts: list[float] = []
        inner = ex.start

        def timed(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                starts.append(time.perf_counter() - t)

        ex.start = timed
        t = time.perf_counter()
        report = system.ctx.loops.get("scheduler").run_once()
        pass_s = time.perf_counter() - t
        released = sum(not native.gated(p) for p in kube.pods_of(native.NATIVE))
        deadline = time.perf_counter() + 30
        while (
            any(native.gated(p) for p in (engine.watches["native-pods"].snapshot() or []))
            and time.perf_counter() < deadline
        ):
            time.sleep(0.01)  # the watch catches up with the releases
        _say("admitted")
        rec = system.ctx.loops.get("reconciler")
        rec.run_once()
        kube.set_phase(
            NS,
            "q-0",
            "Running",
            node=kube.pod(NS, "q-0")["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
        )
        while (engine.watches["native-pods"].snapshot() or []) and not any(
            (p.get("status") or {}).get("phase") == "Running"
            for p in engine.watches["native-pods"].snapshot() or []
        ):
            time.sleep(0.005)
        t = time.perf_counter()
        rec.run_once()
        one_change_s = time.perf_counter() - t
        _say("one change")
        before = len(kube.requests)
        inv = system.ctx.loops.get("inventory")
        for i in range(30):
            clock.advance(2.0)
            rec.run_once()
            if i % 5 == 4:
                inv.run_once()
        per_min = len(kube.requests) - before
        steady = sorted({r for r in kube.requests[before:]})
        system.stop()
        return {
            "nodes": nodes,
            "pods": pods,
            "queued": queued,
            "fill_s": round(fill_s, 2),
            "initial_sync_s": round(sync_s, 3),
            "apply_p50_ms": round(statistics.median(applies) * 1000, 1),
            "apply_p95_ms": round(sorted(applies)[int(0.95 * len(applies))] * 1000, 1),
            "intake_s": round(intake_s, 3),
            "intake_passes": intake_passes,
            "admitted": len(report.admitted),
            "released": released,
            "scheduler_pass_s": round(pass_s, 3),
            "release_p50_ms": round(statistics.median(starts) * 1000, 1),
            "release_p95_ms": round(sorted(starts)[int(0.95 * len(starts))] * 1000, 1),
            "reconcile_after_one_change_ms": round(one_change_s * 1000, 1),
            "api_requests_per_idle_minute": per_min,
            "idle_request_kinds": [list(r) for r in steady],
        }
    finally:
        kube.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=50000)
    ap.add_argument("--queued", type=int, default=200)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    out = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}"}
    runs = []
    for pods in (a.pods // 10, a.pods):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(a.nodes, pods, a.queued, Path(tmp))
        print(json.dumps(r), flush=True)
        runs.append(r)
    out["runs"] = runs  # type: ignore[assignment]
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
