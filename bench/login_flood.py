"""Login flood benchmark (issue 13, item 4): password guessing must not slow other users.

Starts a gpupool server in its own process (as bench/api_load.py does: uvicorn on loopback,
SQLite in a temp dir, the scheduler loop, a fake executor, `--workers N` API worker processes
as `gpupool up --workers N`), with 100 workloads on record. Then, in this process:

- one *reader* makes authenticated requests one after another (`GET /workloads?limit=50` and
  `GET /auth/me` alternately, one every `--interval` s) for `--baseline` s alone, then for
  `--duration` s while
- `--flooders` clients (default 24) post wrong passwords to `POST /auth/login` as fast as the
  server answers, ignoring Retry-After (an attacker does not wait):
  - `--mode spray` (default, the hardest case for the server): each flooder guesses a new
    account on every try and names a new client address (X-Forwarded-For, which uvicorn
    trusts from loopback) every 10 tries, so neither the per-account nor the per-client
    throttle stops it: every try that gets in costs a full argon2 check, and only the bounded
    password pool protects the other requests;
  - `--mode one-account`: all flooders guess one account from one address (the throttle
    blocks them after 5 failures; the rest are cheap 429s).

It reports the reader's latency percentiles before and during the flood (target: p99 <= 100
ms during the flood), and the flood's answers by kind.

    python bench/login_flood.py [--mode spray|one-account] [--workers N] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_load import _serve_on, bench_server, pct  # noqa: E402

PASSWORD = "bench-password"


def serve(data_dir: Path, port: int, workers: int) -> None:
    """Seed (one tenant, the reader, 100 workloads, 4 GPUs), write tokens.json, serve."""
    from gpupool.clock import SystemClock
    from gpupool.domain import GPU, Membership, Node, Quota, Request, Role, Tenant, User, Workload
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.engines.fake.executor import FakeExecutor
    from gpupool.server.security import hash_password
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.store import (
        NodeRepo,
        TenantRepo,
        UserRepo,
        WorkloadRepo,
        new_workload_id,
        open_store,
    )
    from gpupool.system import SystemSettings, build_system

    clock = SystemClock()
    store = open_store(f"sqlite:///{data_dir / 'gpupool.db'}", wal_autocheckpoint=False)
    now = clock.now()
    pw = hash_password(PASSWORD)
    with store.write() as s:
        gpus = tuple(GPU(i, f"GPU-n0-{i}", "H100", 81920) for i in range(4))
        NodeRepo(s).upsert(Node("n0", gpus, cpu_milli=64000, memory_mib=1 << 19))
        TenantRepo(s).save(Tenant("lab", Quota.gpus(0, 0)), now)  # nothing is admitted
        users = UserRepo(s)
        for name in ("reader", "victim"):
            users.create(User(name), pw, now)
            users.set_membership(Membership(name, "lab", Role.MEMBER))
        repo = WorkloadRepo(s)
        for i in range(100):
            w = Workload(
                new_workload_id(),
                "lab",
                "reader",
                Request(gpus=1),
                submitted_at=now + i,
                command=("python", "train.py", f"--seed={i}"),
            )
            repo.add(w, name=f"job-{i}")
    settings = Settings(database_url=store.url, scheduler_interval_s=1.0)
    app = build_system(
        SystemSettings(server=settings), FakeEngine(FakeExecutor(clock)), clock=clock, store=store
    ).app
    ctx = app.state.ctx
    tokens = {"reader": issue_token(ctx, "reader", "bench", None).token}
    (data_dir / "tokens.json.tmp").write_text(json.dumps(tokens))
    os.replace(data_dir / "tokens.json.tmp", data_dir / "tokens.json")
    _serve_on(ctx, app, data_dir, port, workers)


# -- the load ---------------------------------------------------------------------------------


async def run_load(url: str, token: str, args: argparse.Namespace) -> dict:
    import aiohttp

    before: list[float] = []
    during: list[float] = []
    answers: Counter[str] = Counter()
    errors: list[str] = []
    flooding = asyncio.Event()
    stop = asyncio.Event()
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(url + "/api/v1/", connector=conn, timeout=timeout) as http:
        headers = {"Authorization": f"Bearer {token}"}

        async def reader() -> None:
            n = 0
            while not stop.is_set():
                path, params = ("workloads", {"limit": "50"}) if n % 2 == 0 else ("auth/me", {})
                sink = during if flooding.is_set() else before
                t0 = time.perf_counter()
                try:
                    async with http.get(path, params=params, headers=headers) as r:
                        await r.read()
                        if r.status != 200:
                            errors.append(f"reader: {r.status}")
                except (aiohttp.ClientError, TimeoutError) as e:
                    errors.append(f"reader: {e!r}")
                sink.append(time.perf_counter() - t0)
                n += 1
                await asyncio.sleep(args.interval)

        async def flooder(i: int) -> None:
            await flooding.wait()
            n = 0
            while not stop.is_set():
                if args.mode == "spray":
                    user = f"guess-{i}-{n}"
                    client = f"10.{i}.{(n // 10) // 250}.{(n // 10) % 250 + 1}"
                else:
                    user, client = "victim", "10.0.0.1"
                body = {"username": user, "password": f"wrong-{n}"}
                try:
                    async with http.post(
                        "auth/login", json=body, headers={"X-Forwarded-For": client}
                    ) as r:
                        text = await r.text()
                        kind = str(r.status)
                        if r.status == 429:
                            kind += " busy" if "busy" in text else " throttled"
                        answers[kind] += 1
                except (aiohttp.ClientError, TimeoutError) as e:
                    answers["error"] += 1
                    errors.append(f"flooder: {e!r}")
                n += 1

        async def clock() -> None:
            await asyncio.sleep(args.baseline)
            flooding.set()
            await asyncio.sleep(args.duration)
            stop.set()

        await asyncio.gather(clock(), reader(), *(flooder(i) for i in range(args.flooders)))
    return {"before": before, "during": during, "answers": answers, "errors": errors}


def report(res: dict, args: argparse.Namespace) -> str:
    def row(label: str, v: list[float]) -> str:
        ms = [x * 1000 for x in v]
        return (
            f"| {label} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 95):.1f} | "
            f"{pct(ms, 99):.1f} | {max(ms) if ms else float('nan'):.1f} |"
        )

    answers = res["answers"]
    total = sum(answers.values())
    lines = [
        f"mode {args.mode}, {args.flooders} flooders, {args.workers} API worker process(es), "
        f"reader every {args.interval:g} s, baseline {args.baseline:g} s, "
        f"flood {args.duration:g} s",
        "",
        "| authenticated reader | requests | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
        row("before the flood", res["before"]),
        row("during the flood", res["during"]),
        "",
        f"- login attempts during the flood: {total} ({total / args.duration:.0f}/s): "
        + ", ".join(f"{k}: {n}" for k, n in sorted(answers.items())),
        f"- reader errors: {sum(1 for e in res['errors'] if e.startswith('reader'))}",
    ]
    if "server_cpu_s" in res:
        wall = args.baseline + args.duration
        lines.append(
            f"- server CPU (all processes): {res['server_cpu_s']:.1f} s over {wall:g} s "
            f"({res['server_cpu_s'] / wall:.2f} cores); load average "
            f"{res['loadavg'][0]:.1f} -> {res['loadavg'][1]:.1f} on {os.cpu_count()} CPUs"
        )
    p99 = pct([x * 1000 for x in res["during"]], 99)
    lines.append(f"- target p99 <= 100 ms during the flood: {'met' if p99 <= 100 else 'NOT met'}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("spray", "one-account"), default="spray")
    ap.add_argument("--flooders", type=int, default=24)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of flood")
    ap.add_argument("--baseline", type=float, default=5.0, help="seconds before the flood")
    ap.add_argument("--interval", type=float, default=0.05, help="reader's pause (s)")
    ap.add_argument("--workers", type=int, default=0, help="API worker processes")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", type=Path, help="append the markdown report to this file")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.workers)
        return

    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        cmd = [sys.executable, __file__, "--serve", str(data), "--port", str(port)]
        cmd += ["--workers", str(args.workers)]
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        with bench_server(cmd, data, port, args.workers, env=env) as server:
            token = json.loads((data / "tokens.json").read_text())["reader"]
            res = server.measure(lambda: asyncio.run(run_load(server.url, token, args)))
            text = report(res, args)
    print(text)
    if args.out:
        with args.out.open("a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
