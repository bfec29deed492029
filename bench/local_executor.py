"""Local executor costs on this machine: start() latency, poll() and list_running() with many
live jobs, and a reconciler-style pass (tick + poll every job + list_running).

    python bench/local_executor.py [--jobs 200] [--out bench/results/local_executor_<host>.json]

Jobs are `sleep 3600` processes (stopped with SIGKILL at the end); no GPU is needed.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import tempfile
import time
from pathlib import Path

from gpupool.domain import Allocation, Share, Workload
from gpupool.engines.local.executor import LocalExecutor


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(xs: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in xs]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(pct(ms, 99), 3),
        "max_ms": round(max(ms), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpupool-bench-exec-"))
    ex = LocalExecutor(work / "jobs", user_mode="single-user")
    starts: list[float] = []
    for i in range(args.jobs):
        w = Workload(id=f"b{i}", tenant="t", owner="u", command=("sleep", "3600"))
        a = Allocation(w.id, "n", (Share("n", i % 8, f"GPU-{i % 8}", 1000, 81920),), 0)
        t0 = time.perf_counter()
        ex.start(w, a)
        starts.append(time.perf_counter() - t0)
    # wait until every launcher registered itself (pid file written by the launcher)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
        (work / "jobs" / f"b{i}" / "pid").exists() for i in range(args.jobs)
    ):
        time.sleep(0.05)
    polls, lists, passes = [], [], []
    for _ in range(20):
        t0 = time.perf_counter()
        for i in range(args.jobs):
            ex.poll(f"b{i}")
        polls.append((time.perf_counter() - t0) / args.jobs)
        t0 = time.perf_counter()
        running = ex.list_running()
        lists.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ex.tick()
        for i in range(args.jobs):
            ex.poll(f"b{i}")
        ex.list_running()
        passes.append(time.perf_counter() - t0)
    assert len(running) == args.jobs, f"{len(running)} of {args.jobs} jobs running"
    t0 = time.perf_counter()
    for i in range(args.jobs):
        ex.stop(f"b{i}", "bench over", grace_s=0)
    stop_s = time.perf_counter() - t0
    for child in list(ex._children.values()):
        child.wait(timeout=60)
    result = {
        "host": socket.gethostname(),
        "cpus": __import__("os").cpu_count(),
        "python": platform.python_version(),
        "jobs": args.jobs,
        "start": summary(starts),
        "poll_per_job": summary(polls),
        "list_running": summary(lists),
        "reconcile_pass_all_jobs": summary(passes),
        "stop_all_s": round(stop_s, 3),
        "ended_after_stop": sum(ex.poll(f"b{i}").state.finished for i in range(args.jobs)),
    }
    out = Path(args.out or f"bench/results/local_executor_{socket.gethostname()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
