"""In-process API cost: CPU milliseconds per request, old code against new, in one run.

Each measurement is a fresh process that builds the system as the tests do (`build_system`
with the fake engine, SQLite in a temp dir, 64 GPUs on 8 nodes, loops driven by hand) and
times, with the process's CPU clock, `POST /workloads` (1 GPU), `GET /queue` and
`GET /workloads?user=..&limit=50` through FastAPI's test client: the best of 5 batches of 60
each, after 20 to warm up; then one scheduler cycle over what was submitted. CPU time, not
wall time, so the other processes of a shared machine disturb it less than a load test.

    python bench/api_cost.py --baseline /tmp/gpupool-old/src [--rounds 4]

runs the baseline (its gpupool on PYTHONPATH) and this checkout alternately, `--rounds`
times each, and prints per measure the best of each side and the ratio after/before.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PASSWORD = "bench-password"


def measure() -> dict[str, float]:
    """One process's measurements (see the module docstring)."""
    from fastapi.testclient import TestClient

    from gpupool.clock import SystemClock
    from gpupool.domain import GPU, Membership, Node, Quota, Role, Tenant, User
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.server.security import hash_password
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.store import NodeRepo, TenantRepo, UserRepo, open_store
    from gpupool.system import SystemSettings, build_system

    tmp = Path(tempfile.mkdtemp())
    clock = SystemClock()
    store = open_store(f"sqlite:///{tmp / 'gpupool.db'}")
    now = clock.now()
    with store.write() as s:
        for n in range(8):
            gpus = tuple(GPU(i, f"GPU-n{n}-{i}", "H100", 81920) for i in range(8))
            NodeRepo(s).upsert(Node(f"n{n}", gpus, cpu_milli=128000, memory_mib=1 << 20))
        users = UserRepo(s)
        users.create(User("u"), hash_password(PASSWORD), now)
        TenantRepo(s).save(Tenant("lab", Quota.gpus(8, 32)), now)
        users.set_membership(Membership("u", "lab", Role.MEMBER))
    settings = SystemSettings(server=Settings(database_url=store.url, start_loops=False))
    system = build_system(settings, FakeEngine(), clock=clock, store=store)
    client = TestClient(system.app)
    h = {"Authorization": f"Bearer {issue_token(system.ctx, 'u', 'bench', None).token}"}
    job = {"gpus": 1, "command": ["python", "train.py"]}
    calls = {
        "POST /workloads": lambda: client.post("/api/v1/workloads", headers=h, json=job),
        "GET /queue": lambda: client.get("/api/v1/queue", headers=h),
        "GET /workloads": lambda: client.get(
            "/api/v1/workloads", params={"user": "u", "limit": "50"}, headers=h
        ),
    }
    out: dict[str, float] = {}
    for label, call in calls.items():
        for _ in range(20):
            call()
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(60):
                r = call()
                assert r.status_code < 300, r.text
            best = min(best, (time.process_time() - t0) / 60 * 1000)
        out[f"{label} cpu ms"] = best
    loop = system.ctx.loops.get("scheduler")
    assert loop is not None
    t0 = time.process_time()
    loop.run_once()
    out["scheduler cycle cpu ms"] = (time.process_time() - t0) * 1000
    return out


def run(src: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),  # not this checkout: `src` must win
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="the gpupool src directory to compare with")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure()))
        return
    if args.baseline is None:
        print(json.dumps(run(None), indent=1))
        return
    sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
            sides[side].append(run(args.baseline if side == "before" else None))
            print(f"round {r + 1} {side}: {sides[side][-1]}", file=sys.stderr)
    print(f"| measure | before (best of {args.rounds}) | after | ratio after/before |")
    print("|---|---|---|---|")
    for k in sides["after"][0]:
        b = min(x[k] for x in sides["before"])
        a = min(x[k] for x in sides["after"])
        print(f"| {k} | {b:.2f} | {a:.2f} | {a / b:.3f} |")
    print(
        f"\n- before: {args.baseline}; after: this checkout; load average "
        f"{os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
