"""Crash safety of `gpupool up`: submissions from concurrent clients while the server is
killed with SIGKILL and started again; nothing acknowledged may be lost, nothing may start
twice, and no GPU may be given to two jobs at once.

    python bench/crash_safety.py [--backend sqlite|postgres|both] [--submissions 1000]
        [--clients 16] [--kills 2] [--gpus 8] [--postgres-url URL] [--out FILE]

For each backend: start `gpupool up --simulate <N>xH100-80GB` (a fresh data dir; for
PostgreSQL an emptied database), then `--clients` threads submit `--submissions` jobs in
total (1 or 2 whole GPUs each, a mix) over HTTP. Each job appends `start` and `end` lines
(workload id, its CUDA_VISIBLE_DEVICES, wall time) to a shared ledger file. When 1/(k+1),
2/(k+1), ... of the submissions are acknowledged, the server is killed with `kill -9` and
started again on the same data; clients retry a submission whose answer the crash cut off,
with the same `Idempotency-Key` header. Then the bench waits until every acknowledged job
has ended and checks:

- lost: acknowledged (201) ids the server does not know, or that never ran;
- double starts: ids with more than one `start` line in the ledger;
- over-committed GPUs: moments when two jobs' [start, end] intervals on one GPU overlap;
- duplicates: submissions that exist twice (a retry after a cut-off answer that the server
  did not recognise by its Idempotency-Key) -- reported, not a loss.

Results go to stdout and, with --out, are appended to a Markdown file.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

PASSWORD = "crash-safety-password"
TERMINAL = {"succeeded", "failed", "cancelled", "preempted", "culled", "lost"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    data_dir: Path
    port: int
    gpus: int
    database_url: str | None
    jobs_account: str | None
    log: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and wait until /readyz answers 200; returns seconds it took."""
        env = dict(os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD, PYTHONUNBUFFERED="1")
        env.pop("GPUPOOL_DATABASE_URL", None)
        if self.database_url:
            env["GPUPOOL_DATABASE_URL"] = self.database_url
        cmd = [sys.executable, "-c", "from gpupool.cli.main import run; run()", "up"]
        cmd += ["--simulate", f"{self.gpus}xH100-80GB", "--no-jupyterhub", "--workers", "0"]
        cmd += ["--data-dir", str(self.data_dir), "--port", str(self.port)]
        cmd += ["--user-mode", "single-user", "--log-level", "warning"]
        if self.jobs_account and os.geteuid() == 0:
            cmd += ["--jobs-account", self.jobs_account]
        t0 = time.monotonic()
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.starts += 1
        deadline = t0 + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpupool up exited; see {self.log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"gpupool up did not get ready in 120 s; see {self.log}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Tally:
    acked: dict[str, str] = field(default_factory=dict)  # workload id -> submission name
    retries: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def submit_all(
    server: Server, token: str, n: int, clients: int, ledger: Path, tally: Tally, deadline: float
) -> None:
    """`clients` threads submit `n` jobs in total, retrying cut-off submissions."""
    job = (
        f'echo "start $GPUPOOL_WORKLOAD_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)" >> {ledger}; '
        "sleep 0.05; "
        f'echo "end $GPUPOOL_WORKLOAD_ID $CUDA_VISIBLE_DEVICES $(date +%s.%N)" >> {ledger}'
    )
    counter = iter(range(n))
    take = threading.Lock()

    def client() -> None:
        h = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, timeout=30) as c:
            while True:
                with take:
                    i = next(counter, None)
                if i is None:
                    return
                name = f"cs-{i}"
                body = {
                    "gpus": 1 + (i % 5 == 0),
                    "command": ["sh", "-c", job],
                    "name": name,
                    "tenant": "default",
                }
                key = str(uuid.uuid4())
                while True:
                    if time.monotonic() > deadline:
                        raise RuntimeError("submissions did not finish before the deadline")
                    try:
                        r = c.post(
                            "/api/v1/workloads", json=body, headers=h | {"Idempotency-Key": key}
                        )
                    except httpx.HTTPError:
                        r = None
                    with tally.lock:
                        tally.statuses[r.status_code if r is not None else "no answer"] += 1
                        if r is not None and r.status_code in (200, 201):
                            tally.acked[r.json()["id"]] = name
                            break
                        tally.retries += 1
                    time.sleep(0.05)  # the server is restarting: ask again soon

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def all_workloads(server: Server, token: str) -> list[dict]:
    h = {"Authorization": f"Bearer {token}"}
    out: list[dict] = []
    while True:
        r = httpx.get(
            f"{server.url}/api/v1/workloads",
            headers=h,
            params={"limit": 1000, "offset": len(out)},
            timeout=60,
        )
        if r.status_code != 200:
            raise RuntimeError(f"listing workloads answered {r.status_code}: {r.text[:500]}")
        page = r.json()
        items = page["items"] if isinstance(page, dict) else page
        out += items
        if len(items) < 1000:
            return out


def check_ledger(ledger: Path, finished: dict[str, float]) -> tuple[collections.Counter, int, int]:
    """(starts per workload id, over-committed overlaps, jobs with no end line). A job with
    no `end` line (killed before it could write one) ends when the server says it did
    (`finished`: workload id -> finished_at), else never."""
    starts: collections.Counter = collections.Counter()
    spans: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
    for line in ledger.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        what, wid, gpus, t = parts
        if what == "start":
            starts[wid] += 1
        for g in gpus.split(","):
            spans[g].setdefault(wid, [0.0, float("inf")])
            spans[g][wid][0 if what == "start" else 1] = float(t)
    unended = sum(1 for g in spans.values() for s in g.values() if s[1] == float("inf"))
    for per_gpu in spans.values():
        for wid, span in per_gpu.items():
            if span[1] == float("inf") and finished.get(wid):
                span[1] = finished[wid]
    overlaps = 0
    for per_gpu in spans.values():
        ordered = sorted(per_gpu.values())
        busy_until = -1.0
        for start, end in ordered:
            if start < busy_until:
                overlaps += 1
            busy_until = max(busy_until, end)
    return starts, overlaps, unended


def reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"gpupool-crash-{backend}-", dir="/tmp"))
    work.chmod(0o755)
    ledger = work / "ledger"
    ledger.touch()
    ledger.chmod(0o666)  # jobs run as an unprivileged account when the bench runs as root
    url = None
    if backend == "postgres":
        url = args.postgres_url
        reset_postgres(url)
    server = Server(
        work / "data", free_port(), args.gpus, url, args.jobs_account, work / "server.log"
    )
    tally = Tally()
    restart_s: list[float] = []
    try:
        server.start()
        r = httpx.post(
            f"{server.url}/api/v1/auth/login",
            json={"username": "admin", "password": PASSWORD},
            timeout=30,
        )
        r.raise_for_status()
        token = r.json()["token"]
        t0 = time.monotonic()
        deadline = t0 + args.timeout_s
        submitter = threading.Thread(
            target=submit_all,
            args=(server, token, args.submissions, args.clients, ledger, tally, deadline),
            daemon=True,
        )
        submitter.start()
        marks = [args.submissions * (k + 1) // (args.kills + 1) for k in range(args.kills)]
        for mark in marks:
            while len(tally.acked) < mark and submitter.is_alive():
                time.sleep(0.01)
            server.kill9()
            restart_s.append(server.start())
        submitter.join()
        submit_s = time.monotonic() - t0
        acked = dict(tally.acked)
        h = {"Authorization": f"Bearer {token}"}
        pending = set(acked)
        while pending and time.monotonic() < deadline:
            rows = {w["id"]: w for w in all_workloads(server, token)}
            pending = {w for w in pending if rows.get(w, {}).get("state") not in TERMINAL}
            time.sleep(0.5)
        total_s = time.monotonic() - t0
        rows = {w["id"]: w for w in all_workloads(server, token)}
        unknown = [  # not in the list: ask one by one to be sure
            w
            for w in acked
            if w not in rows
            and httpx.get(f"{server.url}/api/v1/workloads/{w}", headers=h).status_code != 200
        ]
        states = collections.Counter(rows[w]["state"] for w in acked if w in rows)
        finished = {w: r.get("finished_at") for w, r in rows.items()}
        starts, overlaps, unended = check_ledger(ledger, finished)
        never_ran = [w for w in acked if starts[w] == 0]
        names = collections.Counter(w.get("name") for w in rows.values())
        return {
            "backend": backend,
            "submissions": args.submissions,
            "clients": args.clients,
            "kills": len(restart_s),
            "gpus": args.gpus,
            "acknowledged": len(acked),
            "lost": len(unknown) + len(never_ran),
            "double_starts": sum(1 for c in starts.values() if c > 1),
            "overcommitted": overlaps,
            "unended": unended,
            "duplicates": sum(c - 1 for n, c in names.items() if n and c > 1),
            "states": dict(states),
            "retries": tally.retries,
            "answers": {str(k): v for k, v in tally.statuses.items()},
            "restart_s": [round(s, 1) for s in restart_s],
            "submit_s": round(submit_s, 1),
            "total_s": round(total_s, 1),
        }
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(results: list[dict[str, object]], args: argparse.Namespace) -> str:
    head = (
        f"\n## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs)\n\n"
        f"`python bench/crash_safety.py --backend {results[0]['backend']} --submissions "
        f"{args.submissions} --clients {args.clients} --kills {args.kills} --gpus {args.gpus}`\n\n"
        "| backend | acknowledged | kill -9 | lost | double starts | over-committed | "
        "duplicates | states | no end line | retries | restart s | total s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = "".join(
        f"| {r['backend']} | {r['acknowledged']}/{r['submissions']} | {r['kills']} | "
        f"**{r['lost']}** | **{r['double_starts']}** | **{r['overcommitted']}** | "
        f"{r['duplicates']} | {r['states']} | {r['unended']} | {r['retries']} | "
        f"{r['restart_s']} | "
        f"{r['total_s']} |\n"
        for r in results
    )
    return head + rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    p.add_argument("--submissions", type=int, default=1000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--kills", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--postgres-url", default=os.environ.get("GPUPOOL_TEST_POSTGRES_URL"))
    p.add_argument(
        "--jobs-account",
        default="nobody",
        help="as root: who jobs run as (an existing account; none is created)",
    )
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, ledger)")
    args = p.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    if "postgres" in backends and not args.postgres_url:
        p.error("PostgreSQL needs --postgres-url or GPUPOOL_TEST_POSTGRES_URL (an empty database)")
    results = []
    for b in backends:  # each backend's row is written as soon as it is measured
        r = run_backend(b, args)
        print(r, flush=True)
        results.append(r)
        text = report([r], args)
        print(text, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(text)
    bad = any(r["lost"] or r["double_starts"] or r["overcommitted"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
