"""API load benchmark (issue 4): many clients polling while workloads are submitted.

Starts a gpupool server in a separate process (uvicorn on loopback, SQLite in a temp dir,
64 simulated GPUs on 8 nodes, the scheduler and reconciler loops running, a fake executor
whose jobs run for 1-3 s), then, in this process:

- N clients (default 200) each poll `GET /workloads?user=<me>` and `GET /queue` alternately,
  one request every `--poll-interval` seconds (default 1 s, with jitter), as `gpupool ls`
  users and open dashboards do;
- a submitter sends `--rate` (default 20) `POST /workloads` per second, 1 GPU each,
  from 40 users in 4 tenants;

for `--duration` seconds (default 20). It reports latency percentiles per endpoint, errors,
and submit -> admitted delay (server side: admitted_at - submitted_at) while GPUs were free.
Targets: p99 <= 100 ms, no errors, admitted <= 1 s.

    python bench/api_load.py [--clients 200] [--rate 20] [--duration 20] [--out FILE.md]

`--baseline SRC` compares with other code (e.g. /tmp/gpupool-old/src, the server run with
that on PYTHONPATH) in one run: `--rounds` rounds of the same load against each, in ABBA
order, then the ratio after/before of the server's CPU per request and of the median
latencies (best round of each side; the median of the rounds' ratios beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TENANTS = ["lab-a", "lab-b", "lab-c", "lab-d"]
USERS_PER_TENANT = 10
NODES, GPUS_PER_NODE = 8, 8


# -- the server process -------------------------------------------------------------------


def serve(data_dir: Path, port: int, workers: int = 1, interval_s: float = 0.5) -> None:
    """Seed the database, write tokens.json, and serve as `gpupool up --workers N` does: this
    process runs the loops (and the fake executor); with N > 0 it starts N API worker
    processes (gpupool.server.workers) that serve the port in front of it."""

    from gpupool.clock import SystemClock
    from gpupool.domain import GPU, Membership, Node, Quota, Role, Tenant, User
    from gpupool.engines.common.executor import ExecState, ExecStatus
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.engines.fake.executor import FakeExecutor
    from gpupool.server.security import hash_password
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.store import NodeRepo, TenantRepo, UserRepo, open_store
    from gpupool.system import SystemSettings, build_system

    class TimedExecutor(FakeExecutor):
        """Jobs succeed 1-3 s after they start (by hash of the id: deterministic)."""

        def poll(self, workload_id: str) -> ExecStatus:
            p = self.world.processes.get(workload_id)
            if p is not None and p.state.alive:
                runtime = 1.0 + (hash(workload_id) % 2000) / 1000
                if self.clock.now() >= p.started_at + runtime:
                    self.finish(workload_id, 0)
            st = super().poll(workload_id)
            return st if st.state is not ExecState.UNKNOWN else st

    clock = SystemClock()
    # as gpupool up opens it: checkpoints are the CheckpointLoop's
    store = open_store(f"sqlite:///{data_dir / 'gpupool.db'}", wal_autocheckpoint=False)
    now = clock.now()
    pw = hash_password("bench-password")
    with store.write() as s:
        for n in range(NODES):
            gpus = tuple(GPU(i, f"GPU-n{n}-{i}", "H100", 81920) for i in range(GPUS_PER_NODE))
            NodeRepo(s).upsert(Node(f"n{n}", gpus, cpu_milli=128000, memory_mib=1 << 20))
        users = UserRepo(s)
        users.create(User("admin", admin=True), pw, now)
        for t in TENANTS:
            TenantRepo(s).save(Tenant(t, Quota.gpus(8, 32)), now)
            for u in range(USERS_PER_TENANT):
                users.create(User(f"{t}-u{u}"), pw, now)
                users.set_membership(Membership(f"{t}-u{u}", t, Role.MEMBER))
    settings = Settings(
        database_url=store.url,
        scheduler_interval_s=interval_s,
        reconciler_interval_s=1.0,
        max_body_bytes=1 << 20,
    )
    app = build_system(
        SystemSettings(server=settings), FakeEngine(TimedExecutor(clock)), clock=clock, store=store
    ).app
    ctx = app.state.ctx
    tokens = {"admin": issue_token(ctx, "admin", "bench", None).token}
    for t in TENANTS:
        for u in range(USERS_PER_TENANT):
            tokens[f"{t}-u{u}"] = issue_token(ctx, f"{t}-u{u}", "bench", None).token
    (data_dir / "tokens.json.tmp").write_text(json.dumps(tokens))
    os.replace(data_dir / "tokens.json.tmp", data_dir / "tokens.json")
    _serve_on(ctx, app, data_dir, port, workers)


def _serve_on(ctx, app, data_dir: Path, port: int, workers: int) -> None:  # noqa: ANN001
    import uvicorn

    from gpupool.server import serving
    from gpupool.server import workers as w

    pool = w.WorkerPool(ctx, data_dir, "127.0.0.1", port, workers, "warning") if workers else None
    sockets = pool.sockets if pool else [w.listen_tcp("127.0.0.1", port, shared=False)]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=60,
    )
    server = serving.make_server(config)
    serving.stop_on_signals(server)
    serving.settle_heap()
    try:
        server.run(sockets=sockets)
    finally:
        if pool is not None:
            pool.close()


# -- the load generator -------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[k]


async def load(url: str, tokens: dict[str, str], args: argparse.Namespace) -> dict:
    # aiohttp, not httpx: httpx's async pool itself tops out near 20 requests/s with 200
    # concurrent connections on the 2-core machine, hiding the server's latency.
    import aiohttp

    lat: dict[str, list[float]] = {"GET /workloads": [], "GET /queue": [], "POST /workloads": []}
    errors: list[str] = []
    users = [u for u in tokens if u != "admin"]
    stop_at = time.monotonic() + args.duration
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(url + "/api/v1/", connector=conn, timeout=timeout) as http:

        async def timed(label: str, method: str, path: str, user: str, **kw) -> None:
            t0 = time.perf_counter()
            try:
                headers = {"Authorization": f"Bearer {tokens[user]}"}
                async with http.request(method, path, headers=headers, **kw) as r:
                    body = await r.read()
                    if r.status >= 400:
                        errors.append(f"{label}: {r.status} {body[:200]!r}")
            except (aiohttp.ClientError, TimeoutError) as e:
                errors.append(f"{label}: {e!r}")
            lat[label].append(time.perf_counter() - t0)

        async def poller(i: int) -> None:
            user = users[i % len(users)]
            await asyncio.sleep(random.random() * args.poll_interval)
            n = 0
            while time.monotonic() < stop_at:
                if n % 2 == 0:
                    params = {"user": user, "limit": "50"}
                    await timed("GET /workloads", "GET", "workloads", user, params=params)
                else:
                    await timed("GET /queue", "GET", "queue", user)
                n += 1
                await asyncio.sleep(args.poll_interval * (0.8 + 0.4 * random.random()))

        async def submitter() -> None:
            period = 1.0 / args.rate
            next_at = time.monotonic()
            tasks = []
            k = 0
            while time.monotonic() < stop_at:
                user = users[k % len(users)]
                body = {"gpus": 1, "command": ["python", "train.py"], "name": f"bench-{k}"}
                job = timed("POST /workloads", "POST", "workloads", user, json=body)
                tasks.append(asyncio.create_task(job))
                k += 1
                next_at += period
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*tasks)

        await asyncio.gather(submitter(), *(poller(i) for i in range(args.clients)))
        # let the last submissions be scheduled, then read admission delays (server clock)
        await asyncio.sleep(2.0)
        headers = {"Authorization": f"Bearer {tokens['admin']}"}
        async with http.get("workloads", params={"limit": "1000"}, headers=headers) as r:
            ws = await r.json()
        async with http.get(url + "/metrics") as r:
            metrics = await r.text()
    cycles = {}
    for line in metrics.splitlines():
        for key in ("gpupool_scheduler_cycle_seconds_sum", "gpupool_scheduler_cycle_seconds_count"):
            if line.startswith(key + " "):
                cycles[key] = float(line.split()[1])
    bench = [w for w in ws if (w["name"] or "").startswith("bench-")]
    delays = [w["admitted_at"] - w["submitted_at"] for w in bench if w["admitted_at"] is not None]
    never = [w["id"] for w in bench if w["admitted_at"] is None and w["state"] == "pending"]
    return {
        "latency": lat,
        "errors": errors,
        "admit_delays": delays,
        "never_admitted": never,
        "submitted": len(bench),
        "cycles": cycles.get("gpupool_scheduler_cycle_seconds_count", 0),
        "mean_cycle_s": cycles.get("gpupool_scheduler_cycle_seconds_sum", 0)
        / max(1, cycles.get("gpupool_scheduler_cycle_seconds_count", 0)),
    }


def report(res: dict, args: argparse.Namespace, wall: float) -> str:
    lines = [
        "| endpoint | requests | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for label, v in res["latency"].items():
        ms = [x * 1000 for x in v]
        lines.append(
            f"| {label} | {len(v)} | {pct(ms, 50):.1f} | {pct(ms, 95):.1f} | "
            f"{pct(ms, 99):.1f} | {max(ms) if ms else float('nan'):.1f} |"
        )
    all_ms = [x * 1000 for v in res["latency"].values() for x in v]
    d = res["admit_delays"]
    total = sum(len(v) for v in res["latency"].values())
    lines += [
        "",
        f"- all requests: {total} in {wall:.1f} s ({total / wall:.0f}/s), "
        f"p99 {pct(all_ms, 99):.1f} ms, errors: {len(res['errors'])}",
        f"- submit -> admitted (server clock, {len(d)} workloads): "
        f"median {statistics.median(d) if d else float('nan'):.3f} s, "
        f"p99 {pct(d, 99):.3f} s, max {max(d) if d else float('nan'):.3f} s; "
        f"still pending at the end: {len(res['never_admitted'])}",
        f"- scheduler: {res['cycles']:.0f} cycles, mean {res['mean_cycle_s'] * 1000:.1f} ms "
        "(snapshot, decide, commit admissions, start)",
        f"- settings: {args.clients} clients, one poll per {args.poll_interval:g} s each, "
        f"{args.rate:g} submissions/s, {args.duration:g} s, "
        f"{NODES * GPUS_PER_NODE} simulated GPUs, jobs run 1-3 s, "
        f"{args.workers} API worker process(es) in front of the server process, "
        f"scheduler timer {args.scheduler_interval:g} s",
    ]
    if "server_cpu_s" in res:
        lines.append(
            f"- server CPU (all processes): {res['server_cpu_s']:.1f} s over the run "
            f"({res['server_cpu_s'] / wall:.2f} cores), "
            f"{res['server_cpu_s'] / max(1, total) * 1000:.1f} ms per request (loops included); "
            f"load average {res['loadavg'][0]:.1f} -> {res['loadavg'][1]:.1f} on "
            f"{os.cpu_count()} CPUs"
        )
    if res["errors"]:
        lines += ["", "first errors:", *[f"    {e}" for e in res["errors"][:5]]]
    return "\n".join(lines)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class bench_server:  # noqa: N801 - used as a context manager, like open()
    """A bench server process (`cmd`, which writes `data`/tokens.json when ready) on `port`:
    entered once every one of its `workers` API processes answers /healthz; left with SIGINT
    (a kill after 30 s). `measure(run)` adds the server's CPU seconds and the load average
    before and after to what `run()` returns."""

    def __init__(self, cmd: list[str], data: Path, port: int, workers: int, **popen) -> None:
        self.cmd, self.data, self.workers, self.popen = cmd, data, workers, popen
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> bench_server:
        import httpx

        self.proc = subprocess.Popen(self.cmd, **self.popen)  # workers inherit a pin
        deadline = time.monotonic() + 120
        seen: set[str] = set()  # every API process answers before the load starts
        while len(seen) < max(1, self.workers):
            try:
                if (self.data / "tokens.json").exists():
                    with httpx.Client() as fresh:  # a new connection each time
                        seen.add(fresh.get(self.url + "/healthz").json()["process"])
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.__exit__()
                raise SystemExit(f"the bench server did not start ({sorted(seen)} answered)")
            time.sleep(0.2)
        return self

    def measure(self, run) -> dict:  # noqa: ANN001
        import psutil

        pids = [self.proc.pid, *(c.pid for c in psutil.Process(self.proc.pid).children())]
        cpu0, load0 = sum(_cpu_seconds(p) for p in pids), os.getloadavg()[0]
        res = run()
        res["server_cpu_s"] = sum(_cpu_seconds(p) for p in pids) - cpu0
        res["loadavg"] = (load0, os.getloadavg()[0])
        return res

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", type=Path, help="append the markdown report to this file")
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="API worker processes in front of the server, as `gpupool up --workers N`",
    )
    ap.add_argument(
        "--scheduler-interval", type=float, default=0.5, help="scheduler loop timer (s)"
    )
    ap.add_argument(
        "--server-cpus",
        help="pin the server process(es) to these CPUs, e.g. 0-3 (Linux; default: no pinning)",
    )
    ap.add_argument(
        "--baseline", type=Path, help="compare with the gpupool source in this src directory"
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds per side with --baseline")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.workers, args.scheduler_interval)
        return
    if args.baseline:
        text = compare(args)
    else:
        res, wall = run_once(args)
        text = report(res, args, wall)
    print(text)
    if args.out:
        with args.out.open("a") as f:
            f.write(text + "\n")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(args: argparse.Namespace, src: Path | None = None) -> tuple[dict, float]:
    """One load against a fresh server (its gpupool from `src` when given); (result, wall)."""
    port = args.port or _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        cmd = [sys.executable, __file__, "--serve", str(data), "--port", str(port)]
        cmd += ["--scheduler-interval", str(args.scheduler_interval)]
        cmd += ["--workers", str(args.workers)]
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
        pin = None
        if args.server_cpus:
            lo, _, hi = args.server_cpus.partition("-")
            cpus = set(range(int(lo), int(hi or lo) + 1))
            pin = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
        with bench_server(cmd, data, port, args.workers, env=env, preexec_fn=pin) as server:
            tokens = json.loads((data / "tokens.json").read_text())
            t0 = time.monotonic()
            res = server.measure(lambda: asyncio.run(load(server.url, tokens, args)))
            return res, time.monotonic() - t0


def _summary(res: dict) -> dict[str, float]:
    """Server CPU ms per request and median latencies (ms) of one run."""
    total = sum(len(v) for v in res["latency"].values())
    out = {"cpu_ms_per_request": res["server_cpu_s"] / max(1, total) * 1000}
    for label, v in res["latency"].items():
        out[f"p50 {label} ms"] = pct([x * 1000 for x in v], 50)
    out["errors"] = len(res["errors"])
    return out


def compare(args: argparse.Namespace) -> str:
    """`--rounds` rounds against the baseline and this code, ABBA order; a markdown report."""
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            res, _ = run_once(args, args.baseline if side == "before" else None)
            sides[side].append(_summary(res))
            print(f"round {r + 1} {side}: {sides[side][-1]}", file=sys.stderr)
    keys = [k for k in sides["after"][0] if k != "errors"]
    lines = [
        f"| measure | before (best of {args.rounds}) | after (best of {args.rounds}) | "
        "ratio after/before | median of the rounds' ratios |",
        "|---|---|---|---|---|",
    ]
    for k in keys:
        b = min(x[k] for x in sides["before"])
        a = min(x[k] for x in sides["after"])
        ratios = [x[k] / y[k] for x, y in zip(sides["after"], sides["before"], strict=True)]
        lines.append(f"| {k} | {b:.2f} | {a:.2f} | {a / b:.3f} | {statistics.median(ratios):.3f} |")
    errors = sum(x["errors"] for side in sides.values() for x in side)
    lines += [
        "",
        f"- before: {args.baseline}; after: this checkout; errors in all runs: {errors:.0f}",
        f"- each run: {args.clients} clients, one poll per {args.poll_interval:g} s each, "
        f"{args.rate:g} submissions/s, {args.duration:g} s, {args.workers} API worker(s), "
        f"{NODES * GPUS_PER_NODE} simulated GPUs (the fake engine), load average "
        f"{os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} CPUs",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
