"""How much a log read grows the server's memory (review F6).

Starts a real server (uvicorn, the local executor, SQLite) in a subprocess, writes a log of
`--mb` MB for one workload, and reads it through the API: the whole log (streamed, the
client discards it as it comes), a tail (`?tail=2000`) and one page (`?offset=`). After each
read it reports the server's peak resident memory (VmHWM of /proc/PID/status) against its
peak before the reads. The client never holds the log either.

    python3 bench/log_read.py --mb 400
    PYTHONPATH=/tmp/gpupool-old/src python3 bench/log_read.py --mb 400   # an older checkout

Results: bench/results/log_read.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

LINE = b"step 000000 loss 0.123456 lr 0.000300 tokens/s 123456.7 " + b"." * 40 + b"\n"


def serve(state: Path, port: int) -> None:
    """The server side: seed a store, register one ended workload, serve on `port`."""
    import uvicorn

    from gpupool.clock import SystemClock
    from gpupool.domain import Membership, Request, Role, Tenant, User, Workload, WorkloadState
    from gpupool.engines.local.executor import LocalExecutor
    from gpupool.server.app import create_app
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.store import TenantRepo, UserRepo, WorkloadRepo, new_workload_id

    settings = Settings(database_url=f"sqlite:///{state}/db.sqlite", start_loops=False)
    clock = SystemClock()
    executor = LocalExecutor(state / "jobs", user_mode="single-user")
    app = create_app(settings, executor=executor, clock=clock)
    ctx = app.state.ctx
    now = clock.now()
    with ctx.store.write() as s:
        TenantRepo(s).save(Tenant("lab"), now)
        UserRepo(s).create(User("ann"), None, now)
        UserRepo(s).set_membership(Membership("ann", "lab", Role.MEMBER))
    w = Workload(
        id=new_workload_id(), tenant="lab", owner="ann", request=Request(), submitted_at=now
    )
    with ctx.store.write() as s:
        WorkloadRepo(s).add(w)
        WorkloadRepo(s).change_state(w.id, WorkloadState.CANCELLED, now, "bench")
    token = issue_token(ctx, "ann", "bench", None).token
    (state / "ready.json").write_text(json.dumps({"workload": w.id, "token": token}))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=400, help="size of the log")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(Path(args.serve), args.port)
        return
    with tempfile.TemporaryDirectory() as tmp:
        state, port = Path(tmp), free_port()
        proc = subprocess.Popen([sys.executable, __file__, "--serve", tmp, "--port", str(port)])
        try:
            run(state, port, proc.pid, args.mb)
        finally:
            proc.terminate()
            proc.wait(30)


def run(state: Path, port: int, pid: int, mb: int) -> None:
    ready = state / "ready.json"
    for _ in range(600):
        if ready.exists():
            break
        time.sleep(0.1)
    info = json.loads(ready.read_text())
    wid, h = info["workload"], {"Authorization": f"Bearer {info['token']}"}
    log = state / "jobs" / wid / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    block = LINE * ((1 << 20) // len(LINE) + 1)
    with open(log, "wb") as f:
        while f.tell() < mb * 1_000_000:
            f.write(block)
        f.write(b"z" * 3_000_000 + b"\n")  # one very long line near the end
        f.write(block + b"the end\n")
    size = os.path.getsize(log)
    url = f"http://127.0.0.1:{port}/api/v1/workloads/{wid}/logs"
    with httpx.Client(timeout=600) as c:
        for _ in range(600):
            try:
                c.get(url, headers=h, params={"tail": 1})
                break
            except httpx.TransportError:
                time.sleep(0.1)
        base = peak_rss_mib(pid)
        print(f"log: {size / 1e6:.0f} MB; server peak RSS before the reads: {base:.1f} MiB")
        t = time.perf_counter()
        got = 0
        with c.stream("GET", url, headers=h) as r:
            r.raise_for_status()
            for chunk in r.iter_raw():
                got += len(chunk)
        dt = time.perf_counter() - t
        whole = peak_rss_mib(pid)
        print(
            f"whole read: {got / 1e6:.0f} MB of JSON in {dt:.1f} s; "
            f"peak RSS {whole:.1f} MiB (+{whole - base:.1f})"
        )
        r = c.get(url, headers=h, params={"tail": 2000})
        r.raise_for_status()
        tail = peak_rss_mib(pid)
        text = r.json()["text"]
        print(
            f"tail=2000: {len(text.encode()) / 1e6:.2f} MB, ends {text[-8:]!r}; "
            f"peak RSS {tail:.1f} MiB (+{tail - base:.1f})"
        )
        r = c.get(url, headers=h, params={"offset": size // 2})
        if r.status_code == 200 and "next_offset" in r.json():
            page = peak_rss_mib(pid)
            print(f"one page at the middle: peak RSS {page:.1f} MiB (+{page - base:.1f})")


if __name__ == "__main__":
    main()
