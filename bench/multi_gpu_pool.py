"""The harness of bench/multi_gpu_check.py (issue 21) and bench/energy_gpu_check.py (issue
35): one `gpupool up` on this host's GPUs (or simulated ones with --dry-run) driven through
its API and CLI as admin, alice and bob, and a `Check` record (criteria, evidence, timing)
per check; the jobs' work folder (`work_dir`) and the run's result file (`write_result`).

`cluster_views` reads what gpupool shows about its GPUs from three places (the dashboard's
API, `gpupool top --once --json` and /metrics) as GPU UUID -> [workload, user, tenant], so
that the checks can compare them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
GPUPOOL = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]
PASSWORD = "multi-gpu-check-admin"
USERS = {"alice": "lab-a", "bob": "lab-b"}
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
ENDED = {"succeeded", "failed", "cancelled", "preempted", "culled", "lost"}
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class Check:
    """One check's record: criteria (name -> ok; `gpu` ones need a real GPU), evidence."""

    def __init__(self, name: str) -> None:
        self.name, self.t0 = name, time.monotonic()
        self.t1 = self.t0
        self.criteria: dict[str, bool] = {}
        self.gpu_only: list[str] = []
        self.evidence: dict[str, object] = {}
        self.errors: list[str] = []
        #: why it was not run on this host (too few GPUs), or None
        self.skipped: str | None = None

    def skip(self, why: str) -> None:
        self.skipped = why
        log(f"  SKIP  {self.name}: {why}")

    def crit(self, name: str, ok: object, gpu: bool = False) -> None:
        self.criteria[name] = bool(ok)
        if gpu:
            self.gpu_only.append(name)
        self.t1 = time.monotonic()
        log(f"  {'PASS' if ok else 'FAIL'}{' (gpu)' if gpu else ''}  {self.name}: {name}")

    def guard(self, fn: Callable[[], object]) -> object:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - recorded; the other checks go on
            self.errors.append(f"{type(e).__name__}: {e}")
            log(f"  ERROR {self.name}: {e}\n{traceback.format_exc()}")
            return None
        finally:
            self.t1 = time.monotonic()

    def passed(self, dry: bool) -> bool:
        if self.skipped is not None:
            return not self.errors
        counted = [ok for n, ok in self.criteria.items() if not (dry and n in self.gpu_only)]
        return not self.errors and (bool(counted) or dry) and all(counted)

    def verdict(self, dry: bool) -> str:
        """PASS, FAIL or SKIP (not run here: too few GPUs; not a failure)."""
        if self.skipped is not None and not self.errors:
            return "SKIP"
        return "PASS" if self.passed(dry) else "FAIL"

    def record(self, dry: bool) -> dict:
        return {
            "passed": self.passed(dry),
            "skipped": self.skipped,
            "criteria": self.criteria,
            "gpu_only": self.gpu_only,
            "errors": self.errors,
            "seconds": round(self.t1 - self.t0, 1),
            "evidence": self.evidence,
        }


class Pool:
    """One `gpupool up` and its API/CLI, as admin or as a named user."""

    def __init__(self, a: argparse.Namespace, work: Path, out: Path, deadline: float) -> None:
        self.a, self.work, self.out, self.deadline = a, work, out, deadline
        self.data = (work / "data").resolve()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cmd = [
            *GPUPOOL,
            "up",
            "--mps",
            "on",
            "--data-dir",
            str(self.data),
            "--port",
            str(port),
            "--no-jupyterhub",
            "--workers",
            "0",
            "--user-mode",
            "single-user",
            "--jobs-account",
            a.jobs_account,
        ]
        if a.dry_run:
            sys.path.insert(0, str(HERE.parent))
            from tests.engines.conftest import make_fake_mps_binary

            cmd += ["--simulate", f"{a.simulate_gpus}xH100-80GB"]
            cmd += ["--mps-binary", make_fake_mps_binary(work / "bin")]
        env = dict(
            os.environ, GPUPOOL_ADMIN_PASSWORD=PASSWORD, PYTHONUNBUFFERED="1", **MULTICAST_OFF
        )
        env.pop("GPUPOOL_DATABASE_URL", None)
        self.log = open(out / "up.log", "w")  # noqa: SIM115 - closed in stop()
        log(f"starting: {' '.join(cmd[3:])}")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.tokens: dict[str, str] = {}
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def left(self, want: float) -> float:
        return max(1.0, min(want, self.deadline - time.monotonic()))

    def wait(self, pred: Callable[[], object], timeout: float, what: str) -> object:
        end = time.monotonic() + self.left(timeout)
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpupool up exited ({self.proc.returncode}); see up.log")
            try:
                got = pred()
            except httpx.TransportError:
                got = None
            if got:
                return got
            time.sleep(0.5)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")

    def login(self, user: str, password: str) -> None:
        r = self.http.post("/api/v1/auth/login", json={"username": user, "password": password})
        r.raise_for_status()
        self.tokens[user] = r.json()["token"]

    def call(self, method: str, path: str, user: str = "admin", **kw: object) -> object:
        h = {"Authorization": f"Bearer {self.tokens[user]}"}
        r = self.http.request(method, "/api/v1" + path, headers=h, **kw)  # type: ignore[arg-type]
        if r.status_code >= 400:
            raise RuntimeError(f"{method} {path} as {user}: {r.status_code} {r.text[:500]}")
        return r.json()

    def cli(self, *args: str, user: str = "admin", timeout: float = 60) -> str:
        env = dict(
            os.environ,
            GPUPOOL_URL=self.url,
            GPUPOOL_TOKEN=self.tokens[user],
            HOME=str(self.work / "home"),
            COLUMNS="200",
        )
        r = subprocess.run(
            [*GPUPOOL, *args], env=env, capture_output=True, text=True, timeout=self.left(timeout)
        )
        if r.returncode != 0:
            raise RuntimeError(f"gpupool {' '.join(args)}: rc {r.returncode}: {r.stderr[-800:]}")
        return r.stdout

    def submit(self, user: str, body: dict) -> str:
        body = {"tenant": USERS[user], "env": self.a.job_env, **body}
        return str(self.call("POST", "/workloads", user, json=body)["id"])  # type: ignore[index]

    def run_cli(self, user: str, name: str, gpus: int, command: list[str]) -> str:
        flags = [f"-e{k}={v}" for k, v in self.a.job_env.items()]
        out = self.cli(
            "run", "--gpus", str(gpus), "--name", name, *flags, "--", *command, user=user
        )
        return out.strip().split()[-1]

    def workload(self, wid: str) -> dict:
        return self.call("GET", f"/workloads/{wid}")  # type: ignore[return-value]

    def wait_state(self, wids: list[str], states: set[str], timeout: float) -> list[dict]:
        def all_there() -> list[dict] | None:
            ws = [self.workload(w) for w in wids]
            if any(w["state"] in ENDED - states for w in ws):
                bad = [(w["id"], w["state"], w.get("reason")) for w in ws if w["state"] in ENDED]
                raise RuntimeError(f"ended early: {bad}")
            return ws if all(w["state"] in states for w in ws) else None

        return self.wait(all_there, timeout, f"{wids} to be {sorted(states)}")  # type: ignore[return-value]

    def lines(self, wid: str, tag: str) -> list[dict]:
        text = self.call("GET", f"/workloads/{wid}/logs")["text"]  # type: ignore[index]
        found = []
        for ln in text.splitlines():  # a launcher may prefix its workers' lines ([rank0]:)
            at = ln.find('{"tag": ')
            with contextlib.suppress(ValueError):
                if at >= 0 and (d := json.loads(ln[at:])).get("tag") == tag:
                    found.append(d)
        return found

    def wait_line(self, wid: str, tag: str, timeout: float) -> dict:
        def got() -> dict | None:
            if (found := self.lines(wid, tag)) or self.workload(wid)["state"] not in ENDED:
                return found[-1] if found else None
            raise RuntimeError(f"{wid} ended without a {tag!r} line")

        return self.wait(got, timeout, f"{tag!r} from {wid}")  # type: ignore[return-value]

    def finish(self, wids: list[str], release: Path) -> list[dict]:
        """Release the jobs, cancel any still active after 30 s; their final records."""
        release.touch()
        with contextlib.suppress(Exception):
            return self.wait_state(wids, ENDED, 30)
        for w in wids:
            with contextlib.suppress(Exception):
                self.call("DELETE", f"/workloads/{w}")
        return self.wait_state(wids, ENDED, 45)

    def stop(self) -> int | None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode

    def set_up_users(self) -> None:
        """Once `gpupool up` is ready: admin logged in, and each of `USERS` a member of its
        tenant, logged in."""
        self.wait(lambda: self.http.get("/readyz").status_code == 200, 120, "gpupool up")
        self.login("admin", PASSWORD)
        for user, tenant in USERS.items():
            self.call("POST", "/tenants", json={"name": tenant})
            self.call("POST", "/users", json={"name": user, "password": f"{user}-pw-12345"})
            self.call("PUT", f"/users/{user}/memberships/{tenant}", json={"role": "member"})
            self.login(user, f"{user}-pw-12345")

    def active(self) -> list[str]:
        """The workloads not ended yet (gpupool up leaves running jobs running)."""
        listed = items(self.call("GET", "/workloads", params={"limit": 100}))
        return [w["id"] for w in listed if w["state"] not in ENDED]

    def save_job_logs(self, tail: int) -> None:
        """OUT/job_logs.txt: the last `tail` lines of every workload's log."""
        log_text = []
        with contextlib.suppress(Exception):
            for w in items(self.call("GET", "/workloads", params={"limit": 100})):
                text = self.call("GET", f"/workloads/{w['id']}/logs", params={"tail": tail})
                log_text.append(
                    f"===== {w['id']} {w.get('name')} {w['state']} "
                    f"exit={w.get('exit_code')}\n{text['text']}"  # type: ignore[index]
                )
        (self.out / "job_logs.txt").write_text("\n".join(log_text))


def work_dir(prefix: str, scripts: Sequence[str]) -> tuple[Path, Path, dict[str, str]]:
    """A throwaway folder under /tmp that the jobs account can read, with `scripts` (from
    bench/) copied in; a cache folder in it that the jobs can write; and the environment
    every job gets (multicast off, its caches there). (work, cache, job env)."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    work.chmod(0o755)  # jobs run as the jobs account and read their scripts from here
    cache = work / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o1777)
    for f in scripts:
        shutil.copy(HERE / f, work / f)
        (work / f).chmod(0o644)
    env = {
        **MULTICAST_OFF,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "XDG_CACHE_HOME": str(cache),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "HOME": str(cache),
    }
    return work, cache, env


def write_result(
    out: Path, name: str, checks: list[Check], result: dict, dry: bool, details: Sequence[str] = ()
) -> int:
    """OUT/`name`.json with every check's record; each verdict, then `details`, then PASSED
    or FAILED on stdout; the exit code (0: every check passed)."""
    result["checks"] = {c.name: c.record(dry) for c in checks}
    result["passed"] = all(c.passed(dry) for c in checks)
    result["seconds"] = round(time.monotonic() - T0, 1)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    for c in checks:
        print(f"{c.verdict(dry)}  {c.name}  ({c.record(dry)['seconds']} s)")
    for line in details:
        print(line)
    print(f"{'PASSED' if result['passed'] else 'FAILED'} in {result['seconds']} s")
    return 0 if result["passed"] else 1


def items(got: object) -> list[dict]:
    return got["items"] if isinstance(got, dict) else got  # type: ignore[return-value,index]


def uuids(w: dict) -> list[str]:
    return [s["gpu_uuid"] for s in (w.get("allocation") or {}).get("shares", [])]


def cluster_views(p: Pool, wids: set[str]) -> dict[str, dict]:
    """Per source (dashboard API, `gpupool top --once --json`, /metrics): GPU UUID -> the
    sorted [workload, user, tenant] of processes of `wids`, plus holders and status."""
    views: dict[str, dict] = {}
    sources = {
        "dashboard": lambda: p.call("GET", "/dashboard/cluster"),
        "top": lambda: json.loads(p.cli("top", "--once", "--json")),
    }
    for src, read in sources.items():
        try:
            data = read()
        except Exception as e:  # noqa: BLE001 - one source failing leaves the others
            views[src] = {"error": f"{type(e).__name__}: {e}"}
            continue
        gpus = [g for n in data["nodes"] for g in n["gpus"]]  # type: ignore[index]
        views[src] = {
            "processes": {
                g["uuid"]: sorted(
                    {
                        (q["workload"], q["user"], q["tenant"])
                        for q in g["processes"]
                        if q["workload"] in wids
                    }
                )
                for g in gpus
            },
            "holders": {g["uuid"]: sorted(h["workload"] for h in g["holders"]) for g in gpus},
            "status": {g["uuid"]: g["status"] for g in gpus},
            "memory_used_mib": {g["uuid"]: g["memory_used_mib"] for g in gpus},
        }
    views["metrics"] = _metrics_view(p, wids)
    return json.loads(json.dumps(views))  # tuples -> lists, as compared below


def _metrics_view(p: Pool, wids: set[str]) -> dict:
    """/metrics: GPU UUID -> [workload, user, tenant] of the per-process series of `wids`,
    and gpupool_allocated_gpus by tenant (or the error that kept it from being read)."""
    procs: dict[str, set] = {}
    allocated: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(p.http.get("/metrics").text):
            for s in fam.samples:
                if (
                    s.name == "gpupool_gpu_process_memory_bytes"
                    and s.labels.get("workload") in wids
                ):
                    got = (s.labels["workload"], s.labels.get("user"), s.labels.get("tenant"))
                    procs.setdefault(s.labels.get("UUID", ""), set()).add(got)
                if s.name == "gpupool_allocated_gpus":
                    allocated[s.labels.get("tenant", "")] = s.value
    except Exception as e:  # noqa: BLE001 - one source failing leaves the others
        return {"error": f"{type(e).__name__}: {e}"}
    return {"processes": {u: sorted(v) for u, v in procs.items()}, "allocated_gpus": allocated}


def attribution(view: dict, uuids_: list[str]) -> dict[str, list]:
    return {u: view.get("processes", {}).get(u, []) for u in uuids_}


def field(view: dict, name: str, uuid: str) -> object:
    return view.get(name, {}).get(uuid)


def snapshot(p: Pool, title: str) -> str:
    parts = [f"===== {title} (t={time.monotonic() - T0:.1f}s)"]
    for cmd in (["ps", "-eo", "pid,ppid,user,etimes,args"], ["nvidia-smi"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            text = r.stdout + r.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            text = f"{e}"
        if cmd[0] == "ps":
            text = "\n".join(ln for ln in text.splitlines() if "mps" in ln or "PID" in ln)
        parts.append(f"--- {' '.join(cmd)}\n{text}")
    out = "\n".join(parts) + "\n"
    with open(p.out / "snapshots.txt", "a") as f:
        f.write(out)
    return out
