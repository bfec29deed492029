"""Fractional GPUs on a real GPU: throughput and isolation, MPS shares vs time-slicing (issue 8).

    PYTHONPATH=src python3 bench/sharing.py --out DIR [--counts 1,2,4,8] [--duration 10]

Every tenant is a job started by gpupool's `LocalExecutor` (so it gets the executor's env:
CUDA_VISIBLE_DEVICES, GPUPOOL_WORKLOAD_ID and, for an MPS share, the limits
`gpupool.engines.local.mps.limits_for` computes) and runs `bench/sharing_worker.py`. Modes:

- ``exclusive``: one tenant alone on the whole GPU (measured at the start and at the end);
  N tenants one after another have exactly that aggregate rate;
- ``timeslice``: N tenants at once with `policed` shares of 1000/N milli and memory/N: plain
  time-slicing, no MPS;
- ``mps``: N tenants at once with `mps` shares of 1000/N milli and memory/N, as clients of the
  MPS control daemon started by gpupool's `MPSManager` (quit at the end, also on errors).

Each tenant measures two phases over a common window (``small``: MLP training, batch 64;
``matmul``: 8192² bf16) and reports iterations/s; aggregate / exclusive goes to
``sharing.json`` and ``sharing.md``. Isolation (``--isolation mps,policed``): 3 tenants run
checked integer matmuls while a 4th allocates 1.5x its share. Under ``mps`` the driver must
refuse it (CUDA out of memory); under ``policed`` this script acts as the node agent: gpupool's
telemetry library (`Sampler`, `Attributor`, `Policer`) must flag ``over_memory`` and the offender
is SIGKILLed after ``--kill-after`` s (the server's telemetry loop's rule), while the others
finish with exact results. Exits 2 (with a message) when there is no GPU, 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from sharing_report import (  # noqa: E402
    Measurement,
    goals,
    isolation_verdict,
    markdown_table,
    parse_counts,
    parse_pct_overrides,
    render_md,
    rows,
    share_size,
    thread_pct_table,
)

from gpupool.clock import SystemClock  # noqa: E402
from gpupool.domain import Allocation, Enforcement, Share, Workload  # noqa: E402
from gpupool.engines.local.executor import LocalExecutor  # noqa: E402
from gpupool.engines.local.mps import MPSManager, limits_for  # noqa: E402

WORKER = str(HERE / "sharing_worker.py")
DRY_RUN_GPU = "1xH100-80GB"
FAKE_MPS = HERE.parent / "tests" / "engines" / "local" / "fake_mps_control.py"
NODE = socket.gethostname()


def _reachable_by_others(path: str) -> bool:
    """Whether an unprivileged account can run `path` (every directory on the way o+x)."""
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents])


#: The Python jobs run with. As root, jobs run as an unprivileged account (never root), which
#: may not reach this interpreter (e.g. one under /root): then the system's python3.
JOB_PYTHON = (
    sys.executable
    if os.geteuid() != 0 or _reachable_by_others(sys.executable)
    else (shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable)
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace, gpu_index: int, uuid: str, memory_mib: int):
        self.args = args
        self.index, self.uuid, self.memory_mib = gpu_index, uuid, memory_mib
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix="gpupool-sharing-"))
        self.work.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # jobs run as an unprivileged account: they must reach it
            self.work.chmod(0o777)
        self.mps = MPSManager(self.work / "mps", binary=args.mps_binary)
        self.ex = LocalExecutor(self.work / "jobs", user_mode="single-user", mps=self.mps)
        self.out_dir = Path(args.out)
        self.result: dict = {"measurements": [], "groups": [], "isolation": {}, "errors": []}
        self.started: list[str] = []

    def stop_everything(self) -> None:
        """Kill every job this run started that still runs, then quit the MPS daemon."""
        for wid in self.started:
            with contextlib.suppress(Exception):
                self.ex.stop(wid, "benchmark ended", grace_s=0)
        self.mps.stop_all()

    # -- jobs --------------------------------------------------------------------------------
    def share(self, n: int, enforcement: Enforcement) -> Share:
        milli, mem = share_size(n, self.memory_mib)
        if milli == 1000:
            enforcement = Enforcement.HARDWARE  # a whole GPU: exclusive, no MPS
        return Share(NODE, self.index, self.uuid, milli, mem, enforcement)

    def start(
        self, wid: str, share: Share, *worker_args: str, env: dict[str, str] | None = None
    ) -> dict:
        if self.args.dry_run:
            worker_args = (*worker_args, "--fake")
        w = Workload(
            id=wid, tenant="bench", owner="bench", command=(JOB_PYTHON, WORKER, *worker_args)
        )
        self.started.append(wid)
        h = self.ex.start(w, Allocation(wid, NODE, (share,), time.time()), env=env)
        return {
            "workload": wid,
            "milli": share.milli,
            "memory_mib": share.memory_mib,
            "asked": str(share.enforcement),
            "enforcement": str(h.enforcement.get(self.uuid, "")),
        }

    def finished(self, wid: str) -> bool:
        return self.ex.poll(wid).state.finished

    def wait_all(self, wids: list[str], timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while not all(self.finished(w) for w in wids):
            if time.time() > deadline:
                for w in wids:
                    self.ex.stop(w, "benchmark timeout", grace_s=0)
                raise TimeoutError(f"jobs {wids} did not finish in {timeout_s:.0f} s")
            time.sleep(0.1)

    def status(self, wid: str) -> dict:
        st = self.ex.poll(wid)
        return {"state": str(st.state), "exit_code": st.exit_code, "message": st.message}

    def tail(self, wid: str) -> str:
        return self.ex.logs(wid, tail=15)

    def barrier(self, sync: Path, label: str, names: list[str], wids: list[str]) -> None:
        """Wait for every tenant's ready file, then write the common start time."""
        deadline = time.time() + self.args.barrier_timeout
        while not all((sync / f"ready-{label}-{n}").exists() for n in names):
            dead = [w for w in wids if self.finished(w)]
            if dead:
                raise RuntimeError(f"{dead[0]} ended before phase {label}: {self.tail(dead[0])}")
            if time.time() > deadline:
                raise TimeoutError(f"tenants not ready for {label} in time")
            time.sleep(0.02)
        tmp = sync / f".go-{label}.tmp"  # atomic: a worker must never read a half-written file
        tmp.write_text(repr(time.time() + 0.5))
        os.replace(tmp, sync / f"go-{label}")

    # -- throughput --------------------------------------------------------------------------
    def group(self, mode: str, n: int, tag: str, pct: int | None = None) -> None:
        """N tenants at once (or one, `exclusive`); `pct` overrides the MPS thread percentage
        gpupool computed (an experiment, reported apart from gpupool's own figures)."""
        a = self.args
        env = None if pct is None else {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}
        enforcement = {"exclusive": Enforcement.HARDWARE, "timeslice": Enforcement.POLICED}.get(
            mode, Enforcement.MPS
        )
        share = self.share(1 if mode == "exclusive" else n, enforcement)
        sync = self.work / f"sync-{tag}"
        sync.mkdir(parents=True)
        sync.chmod(0o777)
        names = [f"t{i}" for i in range(n)]
        wids = [f"{tag}-{nm}" for nm in names]
        phases = a.workloads.split(",")
        info = {"tag": tag, "mode": mode, "n": n, "tenants": []}
        self.result["groups"].append(info)
        log(f"{tag}: {n} tenant(s), share {share.milli} milli / {share.memory_mib} MiB")
        try:
            for nm, wid in zip(names, wids, strict=True):
                args = ["throughput", "--name", nm, "--out", str(sync / f"{nm}.json")]
                args += ["--sync", str(sync), "--phases", a.workloads]
                args += ["--duration", str(a.duration), "--warmup", str(a.warmup)]
                args += ["--matmul-size", str(a.matmul_size)]
                info["tenants"].append(self.start(wid, share, *args, env=env))
            for ph in phases:
                self.barrier(sync, ph, names, wids)
            self.wait_all(wids, a.duration * len(phases) + a.barrier_timeout)
        except Exception as e:
            for w in wids:
                self.ex.stop(w, "benchmark error", grace_s=0)
            info["error"] = f"{e}"
            self.result["errors"].append(f"{tag}: {e}")
            log(f"{tag}: FAILED: {e}")
        results = []
        for nm, wid, t in zip(names, wids, info["tenants"], strict=False):
            path = sync / f"{nm}.json"
            r = json.loads(path.read_text()) if path.exists() else {}
            t.update(status=self.status(wid), worker=r)
            if t["status"]["exit_code"] != 0:
                t["log_tail"] = self.tail(wid)[-1500:]
            results.append(r)
        for ph in phases:
            rates = [r.get("phases", {}).get(ph, {}).get("rate") for r in results]
            if len(rates) != n or any(x is None for x in rates):
                continue
            enf = tuple(t["enforcement"] for t in info["tenants"])
            w0 = results[0]
            extra = {
                "tag": tag,
                "override": pct is not None,
                "thread_pct": w0.get("env", {}).get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                "sms_seen": w0.get("multiprocessors_seen"),
            }
            m = Measurement(mode, n, ph, tuple(rates), enf, extra)
            self.result["measurements"].append(asdict(m))
            log(f"{tag} {ph}: aggregate {m.aggregate:.1f} it/s, per tenant {rates}")
        self.save()

    # -- isolation ---------------------------------------------------------------------------
    def isolation(self, mode: str) -> dict:
        a = self.args
        n = a.isolation_tenants
        enforcement = Enforcement.MPS if mode == "mps" else Enforcement.POLICED
        share = self.share(n, enforcement)
        tag = f"iso-{mode}"
        sync = self.work / f"sync-{tag}"
        sync.mkdir(parents=True)
        sync.chmod(0o777)
        target = int(share.memory_mib * 1.5)
        rec: dict = {
            "mode": mode,
            "tenants": n,
            "share_milli": share.milli,
            "share_memory_mib": share.memory_mib,
            "offender_target_mib": target,
            "victims": [],
        }
        if mode == "mps":
            rec["mps_limits"] = asdict(limits_for(share))
        self.result["isolation"][mode] = rec
        log(
            f"{tag}: {n - 1} checked tenants + 1 offender asking {target} MiB of {share.memory_mib}"
        )
        victims = [f"v{i}" for i in range(n - 1)]
        vwids = [f"{tag}-{v}" for v in victims]
        hog_wid = f"{tag}-offender"
        try:
            for v, wid in zip(victims, vwids, strict=True):
                args = ["checked", "--name", v, "--out", str(sync / f"{v}.json")]
                args += ["--sync", str(sync), "--hold-mib", str(a.victim_hold_mib)]
                rec["victims"].append(self.start(wid, share, *args))
            deadline = time.time() + a.barrier_timeout
            while not all((sync / f"ready-checked-{v}").exists() for v in victims):
                if any(self.finished(w) for w in vwids) or time.time() > deadline:
                    raise RuntimeError(f"victims did not start: {self.tail(vwids[0])}")
                time.sleep(0.05)
            hog_args = ["hog", "--name", "offender", "--out", str(sync / "offender.json")]
            hog_args += ["--target-mib", str(target), "--step-mib", "256", "--hold-s", "20"]
            rec["offender"] = self.start(hog_wid, share, *hog_args)
            t_start = time.time()
            if mode == "policed":
                rec["agent"] = self.police(hog_wid, share, vwids, t_start, sync)
            self.wait_all([hog_wid], a.barrier_timeout)
            rec["offender"]["seconds_to_end"] = round(time.time() - t_start, 2)
            time.sleep(a.after_s)  # victims keep working after the offender's end
            (sync / "stop").write_text("stop")
            self.wait_all(vwids, a.barrier_timeout)
        except Exception as e:
            for w in [*vwids, hog_wid]:
                self.ex.stop(w, "benchmark error", grace_s=0)
            rec["error"] = str(e)
            self.result["errors"].append(f"{tag}: {e}")
            log(f"{tag}: FAILED: {e}")
        for v, wid, t in zip(victims, vwids, rec["victims"], strict=False):
            p = sync / f"{v}.json"
            t.update(
                status=self.status(wid), worker=json.loads(p.read_text()) if p.exists() else {}
            )
            if t["status"]["exit_code"] != 0:
                t["log_tail"] = self.tail(wid)[-1500:]
        p = sync / "offender.json"
        if "offender" in rec:
            rec["offender"].update(
                status=self.status(hog_wid),
                worker=json.loads(p.read_text()) if p.exists() else {},
                log_tail=self.tail(hog_wid)[-1500:],
            )
        rec["verdict"] = isolation_verdict(rec)
        log(f"{tag}: {rec['verdict']}")
        self.save()
        return rec

    def police(self, hog_wid: str, share: Share, vwids: list[str], t0: float, sync: Path) -> dict:
        """Act as the node agent: sample, attribute, police; SIGKILL a policed over_memory."""
        from gpupool.telemetry import Attributor, DetectionKind, Policer, PolicingConfig, Sampler
        from gpupool.telemetry.opening import open_source

        allocs = [Allocation(w, NODE, (share,), t0) for w in [*vwids, hog_wid]]
        source = open_source(DRY_RUN_GPU if self.args.dry_run else None)
        sampler = Sampler(
            source,
            interval_s=self.args.interval,
            attributor=Attributor(),
            policer=Policer(SystemClock(), PolicingConfig(idle_after_s=1e9)),
            allocations=lambda: allocs,
        )
        events: list[dict] = []
        warned: set = set()
        killed = False
        try:
            while not self.finished(hog_wid) and time.time() - t0 < self.args.barrier_timeout:
                if self.args.dry_run:
                    feed_simulated(source, sync)
                frame = sampler.sample_once()
                for d in frame.detections:
                    if d.kind is DetectionKind.IDLE:
                        continue
                    if d.key not in warned:
                        warned.add(d.key)
                        events.append(_event("warn", d, t0))
                    act = d.kind is DetectionKind.OVER_MEMORY and d.enforcement not in (
                        Enforcement.MPS,
                        Enforcement.HARDWARE,
                    )
                    if act and not killed and d.duration_s >= self.args.kill_after:
                        for pid in d.pids:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(pid, signal.SIGKILL)
                        killed = True
                        events.append(_event("killed", d, t0))
                        log(f"agent: SIGKILL {d.pids}: {d.message}")
                time.sleep(self.args.interval)
        finally:
            source.close()
        return {
            "interval_s": self.args.interval,
            "kill_after_s": self.args.kill_after,
            "events": events,
            "killed": killed,
        }

    # -- output ------------------------------------------------------------------------------
    def save(self) -> None:
        write_results(self.result, self.out_dir)


def write_results(result: dict, out_dir: Path) -> None:
    """Derive rows, goals and tables from the measurements; write sharing.json and sharing.md."""
    every = [
        Measurement(**{**m, "rates": tuple(m["rates"]), "enforcement": tuple(m["enforcement"])})
        for m in result["measurements"]
    ]
    ms = [m for m in every if not m.extra.get("override")]
    rs = rows(ms)
    result["thread_pct_table"] = thread_pct_table(every)
    result["rows"] = [asdict(r) for r in rs]
    result["goals"] = goals(rs)
    result["table"] = markdown_table(ms)
    (out_dir / "sharing.json").write_text(json.dumps(result, indent=1, default=str))
    (out_dir / "sharing.md").write_text(render_md(result))


def rerender(json_path: Path) -> int:
    """Rewrite the derived parts of a recorded run with this version's report code.

    Raw data (groups, measurements' rates, isolation records) stay as recorded; the thread
    percentage and SMs of older records are filled in from the workers' own reports."""
    try:
        result = json.loads(json_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"sharing: cannot read {json_path}: {e}", file=sys.stderr)
        return 2
    facts = {g["tag"]: (g["tenants"] or [{}])[0].get("worker", {}) for g in result["groups"]}
    for m in result["measurements"]:
        w = facts.get(m["extra"].get("tag"), {})
        m["extra"].setdefault("override", False)
        m["extra"].setdefault(
            "thread_pct", w.get("env", {}).get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        )
        m["extra"].setdefault("sms_seen", w.get("multiprocessors_seen"))
    write_results(result, json_path.parent)
    return 0


def feed_simulated(source, sync: Path) -> None:
    """--dry-run: show the fake offender on the simulated GPU with the memory it claims."""
    p = sync / "offender.json"
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        w = json.loads(p.read_text())
        source.add_process(0, w["pid"], memory_mib=float(w.get("allocated_mib", 0)))


def _event(what: str, d, t0: float) -> dict:
    return {
        "what": what,
        "at_s": round(time.time() - t0, 2),
        "kind": str(d.kind),
        "workload": d.workload_id,
        "pids": list(d.pids),
        "observed_mib": d.observed,
        "limit_mib": d.limit,
        "enforcement": None if d.enforcement is None else str(d.enforcement),
        "duration_s": round(d.duration_s, 2),
        "message": d.message,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "bench/results/sharing")
    p.add_argument("--counts", default="1,2,4,8", help="tenant counts N")
    p.add_argument("--modes", default="timeslice,mps", help="concurrent modes to run")
    p.add_argument("--workloads", default="small,matmul")
    p.add_argument("--duration", type=float, default=10.0, help="measured window per phase, s")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--matmul-size", type=int, default=8192)
    p.add_argument("--isolation", default="policed,mps", help="isolation checks to run ('' = none)")
    p.add_argument("--isolation-tenants", type=int, default=4)
    p.add_argument("--victim-hold-mib", type=int, default=2048)
    p.add_argument("--kill-after", type=float, default=2.0, help="policed: s over share, then kill")
    p.add_argument("--interval", type=float, default=0.5, help="policed: agent sampling period")
    p.add_argument("--after-s", type=float, default=2.0, help="victims run on this long after")
    p.add_argument("--barrier-timeout", type=float, default=120.0)
    p.add_argument("--mps-binary", default="nvidia-cuda-mps-control")
    p.add_argument(
        "--mps-pcts",
        default="",
        help="experiment: N:P pairs, N tenants under MPS with thread percentage P instead of "
        "gpupool's (e.g. 8:14,8:100)",
    )
    p.add_argument("--work-dir", default=None)
    p.add_argument("--render", metavar="JSON", help="only re-render a recorded sharing.json")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="no GPU: simulated GPU, workers without PyTorch, a stand-in MPS daemon",
    )
    args = p.parse_args(argv)
    try:
        args.counts_list = parse_counts(args.counts)
        args.pct_list = parse_pct_overrides(args.mps_pcts)
    except ValueError as e:
        p.error(str(e))
    bad = set(args.modes.split(",")) - {"timeslice", "mps", ""}
    bad |= set(args.isolation.split(",")) - {"policed", "mps", ""}
    bad |= set(args.workloads.split(",")) - {"small", "matmul"}
    if bad:
        p.error(f"unknown mode/workload {sorted(bad)}: see --help")
    if args.isolation_tenants < 2:
        p.error("--isolation-tenants must be >= 2 (victims + one offender)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return rerender(Path(args.render))
    from gpupool.telemetry.opening import open_source
    from gpupool.telemetry.source import NoGPUError, TelemetryError

    if args.dry_run:
        args.mps_binary = fake_mps_binary(Path(tempfile.mkdtemp(prefix="gpupool-fake-mps-")))
    try:
        src = open_source(DRY_RUN_GPU if args.dry_run else None)
    except (NoGPUError, TelemetryError, ImportError) as e:
        print(
            f"sharing: no usable NVIDIA GPU here ({e}); run this on a GPU machine", file=sys.stderr
        )
        return 2
    snap = src.snapshot()
    src.close()
    if not snap.gpus:
        print("sharing: NVML sees no GPU; run this on a GPU machine", file=sys.stderr)
        return 2
    g = snap.gpus[0]
    mem = int(g.memory_total_bytes // 2**20) if g.memory_total_bytes else 0
    # children run from another cwd: give them an absolute path to gpupool
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    # `timeout` sends SIGTERM: end through `finally` (kill the jobs, quit the MPS daemon, save)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(args, g.index, g.uuid, mem)
    b.result["environment"] = {
        "host": NODE,
        "gpu_name": g.name,
        "gpu_uuid": g.uuid,
        "gpu_memory_mib": mem,
        "driver": snap.driver_version,
        "cuda": snap.cuda_version,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "PYTHONPATH=src python3 bench/sharing.py " + shlex.join(argv or sys.argv[1:]),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "matmul_size": args.matmul_size,
        "python": sys.version.split()[0],
        "dry_run": args.dry_run,
    }
    modes = [m for m in args.modes.split(",") if m]
    iso = [m for m in args.isolation.split(",") if m]
    counts = [n for n in args.counts_list if n > 1]
    try:
        b.group("exclusive", 1, "exclusive-start")
        if "timeslice" in modes:
            for n in counts:
                b.group("timeslice", n, f"timeslice-n{n}")
        if "policed" in iso:
            b.isolation("policed")
        if "mps" in modes or "mps" in iso or args.pct_list:
            ok = b.mps.ensure(g.uuid)
            b.result["mps_daemon"] = {"healthy": ok, "pipe_dir": str(b.mps.pipe_dir(g.uuid))}
            log(f"MPS daemon healthy: {ok}")
            if "mps" in modes:
                for n in counts:
                    b.group("mps", n, f"mps-n{n}")
            for n, pct in args.pct_list:
                b.group("mps", n, f"mps-n{n}-pct{pct}", pct=pct)
            if "mps" in iso:
                b.isolation("mps")
            b.mps.stop_all()
            b.result["mps_daemon"]["stopped"] = wait_mps_gone(b.mps, g.uuid)
        b.group("exclusive", 1, "exclusive-end")
    except Exception:
        b.result["errors"].append(traceback.format_exc())
        log(traceback.format_exc())
    finally:
        b.stop_everything()
        b.save()
    failed = b.result["errors"] or not all(
        r.get("verdict", {}).get("ok") for r in b.result["isolation"].values()
    )
    log(f"goals: {b.result.get('goals')}")
    return 1 if failed else 0


def fake_mps_binary(directory: Path) -> str:
    """--dry-run: an executable that behaves like nvidia-cuda-mps-control (the tests' stand-in)."""
    path = directory / "nvidia-cuda-mps-control"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_MPS}" "$@"\n')
    path.chmod(0o755)
    return str(path)


def wait_mps_gone(mgr: MPSManager, uuid: str, timeout_s: float = 15.0) -> bool:
    """After `quit`: wait for the daemon and any nvidia-cuda-mps-server to exit."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        servers = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                with contextlib.suppress(OSError):
                    if (p / "comm").read_text().strip().startswith("nvidia-cuda-mps"):
                        servers.append(p.name)
        if mgr.daemon_pid(uuid) is None and not servers:
            return True
        time.sleep(0.2)
    return False


if __name__ == "__main__":
    sys.exit(main())
