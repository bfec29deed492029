"""Benchmarks of the slurm engine (issue 16); results in bench/results/slurm_engine.md.

1. ``latency``: admission -> RUNNING in Slurm on an idle node, with the real Slurm of
   scripts/services.sh (start_slurm; needs root, SLURM_CONF set): a gpupool system on the
   slurm engine (SQLite), one 1-GPU job submitted through the API, then the scheduler pass
   that admits and submits it; the time until `squeue` says RUNNING. Target <= 2 s.
2. ``reconcile``: the executor's share of one reconcile pass over 5,000 Slurm jobs, from a
   synthetic `squeue --json` (Slurm 22.05 shape) served by a stand-in runner: `tick()` (one
   squeue read and parse), a `poll()` per workload and `list_running()`. Target <= 1 s.

    PYTHONPATH=src python bench/slurm_engine.py reconcile
    PYTHONPATH=src SLURM_CONF=... python bench/slurm_engine.py latency [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpupool.clock import ManualClock
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.executor import SlurmExecutor


def synthetic_squeue(n: int) -> str:
    jobs = []
    for i in range(n):
        state = ("RUNNING", "PENDING", "COMPLETED")[i % 3]
        jobs.append(
            {
                "job_id": 1000 + i,
                "name": f"gpupool-w-{i:06d}",
                "account": "gp.lab",
                "user_name": "ann",
                "job_state": state,
                "state_reason": "None" if state != "PENDING" else "Resources",
                "start_time": 1_780_000_000,
                "end_time": 1_780_000_100 if state == "COMPLETED" else 0,
                "exit_code": 0,
                "batch_host": f"node{i % 200:03d}",
                "nodes": f"node{i % 200:03d}",
                "gres_detail": ["gpu:h100:1(IDX:0)"] if state == "RUNNING" else [],
                "tres_per_node": "gres:gpu:h100:1",
                "standard_output": f"/shared/out/w-{i:06d}.out",
                "comment": f"gpupool:w-{i:06d}",
            }
        )
    return json.dumps({"meta": {}, "errors": [], "jobs": jobs})


def bench_reconcile(n: int, rounds: int) -> dict[str, float]:
    payload = synthetic_squeue(n)

    def runner(args, **kw):  # noqa: ANN001, ANN003, ANN202 - subprocess.run's stand-in
        return subprocess.CompletedProcess(args, 0, payload, "")

    clock = ManualClock(1_780_000_050.0)
    with tempfile.TemporaryDirectory() as out:
        ex = SlurmExecutor(
            SlurmCLI("/dev/null", runner=runner),
            clock,
            Path(out),
            account_of=lambda t: "gp." + t,
            per_user=False,
            pending_timeout_s=1e9,
        )
        ids = [f"w-{i:06d}" for i in range(n)]
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            ex.tick()
            states = [ex.poll(w).state for w in ids]
            running = ex.list_running()
            times.append(time.perf_counter() - t0)
        assert len(states) == n and len(running) == (n + 2) // 3 + (n + 1) // 3
    return {"median_s": statistics.median(times), "max_s": max(times)}


def bench_latency(runs: int) -> list[float]:
    from fastapi.testclient import TestClient

    from gpupool.clock import SystemClock
    from gpupool.domain import Membership, Quota, Role, Tenant, User
    from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
    from gpupool.server.loops.scheduler import SchedulerLoop
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.store import TenantRepo, UserRepo, open_store
    from gpupool.system import SystemSettings, build_system

    user = (
        "nobody"
        if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0"
        else "slann"
    )
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", user], capture_output=True)
    out = Path(tempfile.mkdtemp(prefix="gpupool-slurm-bench-"))
    db = tempfile.mkdtemp(prefix="gpupool-slurm-bench-db-")
    url = f"sqlite:///{db}/g.db"
    clock = SystemClock()
    store = open_store(url)
    with store.write() as s:
        TenantRepo(s).save(Tenant("bench", Quota.gpus(0, 4)), clock.now())
        UserRepo(s).create(User(user), "x", clock.now())
        UserRepo(s).set_membership(Membership(user, "bench", Role.MEMBER))
    engine = SlurmEngine(SlurmOptions(output_dir=out))
    system = build_system(
        SystemSettings(server=Settings(database_url=url, start_loops=False)),
        engine,
        clock=clock,
        store=store,
    )
    token = issue_token(system.ctx, user, "bench", None).token
    sched = system.ctx.loops.get("scheduler")
    assert isinstance(sched, SchedulerLoop)
    latencies = []
    with TestClient(system.app) as client:
        for _ in range(runs):
            r = client.post(
                "/api/v1/workloads",
                json={"gpus": 1, "command": ["sleep", "2"]},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 201, r.text
            wid = r.json()["id"]
            t0 = time.perf_counter()
            sched.run_once()  # admits and submits
            name = f"gpupool-{wid}"
            while True:
                st = subprocess.run(
                    ["squeue", "-h", "--name", name, "-o", "%T"], capture_output=True, text=True
                ).stdout.strip()
                if st == "RUNNING" or time.perf_counter() - t0 > 30:
                    break
                time.sleep(0.02)
            latencies.append(time.perf_counter() - t0)
            subprocess.run(["scancel", "--name", name])
            deadline = time.perf_counter() + 20
            while (
                time.perf_counter() < deadline
                and subprocess.run(
                    ["squeue", "-h", "--name", name, "-t", "running,completing"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            ):
                time.sleep(0.1)
            system.ctx.loops.get("reconciler").run_once()
    system.stop()
    return latencies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["reconcile", "latency"])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=10)
    a = p.parse_args()
    if a.what == "reconcile":
        r = bench_reconcile(a.jobs, a.rounds)
        verdict = "PASS" if r["median_s"] <= 1.0 else "FAIL"
        print(
            f"reconcile over {a.jobs} Slurm jobs: median {r['median_s']:.3f} s, "
            f"max {r['max_s']:.3f} s ({a.rounds} rounds) target <= 1 s: {verdict}"
        )
    else:
        lat = sorted(bench_latency(a.runs))
        verdict = "PASS" if statistics.median(lat) <= 2.0 else "FAIL"
        print(
            f"admission -> RUNNING in Slurm ({a.runs} runs): median "
            f"{statistics.median(lat):.2f} s, max {lat[-1]:.2f} s; target <= 2 s: {verdict}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
