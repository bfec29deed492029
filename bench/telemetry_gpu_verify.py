"""Real-GPU check of telemetry (issue 3), run on a machine with an NVIDIA GPU.

Writes to $OUT (or --out): gpu_verify.json (everything below), metrics.txt (a /metrics
scrape). Steps: discovery via the CLI; two PyTorch processes with GPUPOOL_WORKLOAD_ID
(one directly, one through its parent) attributed to workload, user and tenant; their
memory and SM utilization per process; policing on them; `gpupool top --once --json`;
`gpupool exporter` scraped; the sampling cost on the real GPU; a CUDA MPS client seen as
such (own daemon under /tmp, quit at the end). Never changes MIG mode or resets the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpupool.clock import SystemClock
from gpupool.domain import Allocation, Enforcement, Share
from gpupool.telemetry import Attributor, Policer, PolicingConfig, Sampler
from gpupool.telemetry.frame_json import frame_view
from gpupool.telemetry.nvml import NVMLSource

HERE = Path(__file__).resolve().parent
WORKER = HERE / "telemetry_gpu_worker.py"
OWNERS = {
    "w-demo": ("alice", "physics/lab-a"),
    "w-child": ("bob", "physics/lab-b"),
    "w-mps": ("carol", "bio/lab-c"),
}


def log(*args: object) -> None:
    print(time.strftime("%H:%M:%S"), *args, flush=True)


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def cli_command() -> tuple[list[str], str]:
    """The full `gpupool` CLI if it imports here, else the telemetry commands alone."""
    probe = sh([sys.executable, "-c", "import gpupool.cli.main"])
    if probe.returncode == 0:
        code = "import sys; from gpupool.cli.main import run; sys.argv[0] = 'gpupool'; run()"
        return [sys.executable, "-c", code], "gpupool (full CLI)"
    return [sys.executable, "-m", "gpupool.cli.telemetry"], (
        "python -m gpupool.cli.telemetry (full CLI did not import: "
        + probe.stderr.strip().splitlines()[-1][:200]
        + ")"
    )


def start_worker(tag: str, mem_gib: float, env: dict, via_parent: bool = False):
    ready = Path(f"/tmp/gpupool-{tag}.ready")
    ready.unlink(missing_ok=True)
    args = [
        sys.executable,
        str(WORKER),
        "--mem-gib",
        str(mem_gib),
        "--seconds",
        "150",
        "--ready",
        str(ready),
    ]
    if via_parent:  # the shell carries the variable; the GPU process itself does not
        inner = " ".join(["env", "-u", "GPUPOOL_WORKLOAD_ID", *args])
        proc = subprocess.Popen(["sh", "-c", f"{inner}; true"], env=env, start_new_session=True)
    else:
        proc = subprocess.Popen(args, env=env, start_new_session=True)
    return proc, ready


def wait_ready(ready: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    end = time.time() + seconds
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early with {proc.returncode}")
        if time.time() > end:
            raise RuntimeError("worker not ready in time")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    """End the worker and its children (each worker leads its own process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue


def sample_frames(sampler: Sampler, n: int, every: float = 1.0) -> list[dict]:
    frames = []
    for _ in range(n):
        frames.append(frame_view(sampler.sample_once()))
        time.sleep(every)
    return frames


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpupool-verify"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"checks": {}}
    checks = res["checks"]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS")}
    base_env.pop("GPUPOOL_WORKLOAD_ID", None)

    smi = sh(
        [
            "nvidia-smi",
            "--query-gpu=name,uuid,memory.total,driver_version,mig.mode.current,compute_mode",
            "--format=csv,noheader",
        ]
    )
    res["nvidia_smi"] = smi.stdout.strip()
    vers = sh(
        [
            sys.executable,
            "-c",
            "import importlib.metadata as m; print({p: m.version(p) "
            "for p in ['nvidia-ml-py','prometheus-client','torch','typer','rich']})",
        ]
    )
    res["versions"] = vers.stdout.strip()
    log("nvidia-smi:", res["nvidia_smi"])

    cli, cli_kind = cli_command()
    res["cli"] = cli_kind
    dev = sh([*cli, "devices", "--local", "--json"], env=base_env)
    res["devices_rc"] = dev.returncode
    devices = json.loads(dev.stdout) if dev.returncode == 0 else {"stderr": dev.stderr}
    res["devices"] = devices
    g0 = (devices.get("gpus") or [{}])[0]
    smi_name = res["nvidia_smi"].split(",")[0].strip()
    checks["discovered_true_model"] = g0.get("name") == smi_name
    smi_mib = int(res["nvidia_smi"].split(",")[2].strip().split()[0])
    checks["discovered_true_memory"] = (
        g0.get("memory_total_bytes") is not None
        and abs(g0["memory_total_bytes"] / 2**20 - smi_mib) <= 1
    )
    log("devices:", g0.get("name"), g0.get("memory_total_bytes"), checks)

    # -- PyTorch processes with workload ids ------------------------------------------------
    env_a = {**base_env, "GPUPOOL_WORKLOAD_ID": "w-demo"}
    env_b = {**base_env, "GPUPOOL_WORKLOAD_ID": "w-child"}
    a, ready_a = start_worker("a", 3.0, env_a)
    b, ready_b = start_worker("b", 1.0, env_b, via_parent=True)
    try:
        wait_ready(ready_a, a)
        wait_ready(ready_b, b)
        log("workers ready", a.pid, b.pid)
        src = NVMLSource.open()
        uuid = src.snapshot().gpus[0].uuid
        allocs = [
            Allocation(
                "w-demo",
                "local",
                (Share("local", 0, uuid, 500, 2048, Enforcement.POLICED),),
                time.time(),
            )
        ]
        sampler = Sampler(
            src,
            clock=SystemClock(),
            attributor=Attributor(resolve_workload=OWNERS),
            policer=Policer(SystemClock(), PolicingConfig(idle_after_s=0)),
            allocations=lambda: allocs,
        )
        import pynvml

        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        raw = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
        res["nvml_process_util_raw"] = {
            "wall_us": int(time.time() * 1e6),
            "samples": len(raw),
            "newest": [
                (s.pid, s.timeStamp, s.smUtil) for s in sorted(raw, key=lambda s: s.timeStamp)[-6:]
            ],
        }
        frames = sample_frames(sampler, 6)
        res["frames_torch"] = frames
        procs = {p["pid"]: p for p in frames[-1]["gpus"][0]["processes"]}
        pa = procs.get(a.pid)
        pb = next((p for p in procs.values() if p["workload"] == "w-child"), None)
        checks["torch_attributed_workload_user_tenant"] = bool(
            pa
            and pa["workload"] == "w-demo"
            and pa["user"] == "alice"
            and pa["tenant"] == "physics/lab-a"
        )
        checks["child_attributed_via_parent"] = bool(pb and pb["user"] == "bob")
        checks["per_process_memory_read"] = bool(pa and (pa["memory_mib"] or 0) >= 3000)
        sm_series = [
            next((p["sm_util"] for p in f["gpus"][0]["processes"] if p["pid"] == a.pid), None)
            for f in frames
        ]
        res["sm_util_series_w_demo"] = sm_series
        checks["per_process_sm_util_read"] = any((v or 0) > 0 for v in sm_series)
        first = frames[0]["gpus"][0]["processes"]
        checks["first_sample_sm_util_nonzero"] = sum(p["sm_util"] or 0 for p in first) > 0
        kinds = {d["kind"] for d in frames[-1]["gpus"][0]["detections"]}
        checks["policing_over_memory_w_demo"] = "over_memory" in kinds
        checks["policing_foreign_gpu_w_child"] = "foreign_gpu" in kinds
        log("torch frame checks", checks)

        wide = {**base_env, "COLUMNS": "200"}
        res["top_once_screen"] = sh([*cli, "top", "--local", "--once"], env=wide).stdout
        res["devices_screen"] = sh([*cli, "devices", "--local", "-o", "wide"], env=wide).stdout
        top = sh([*cli, "top", "--local", "--once", "--json"], env=base_env)
        res["top_once_json_rc"] = top.returncode
        res["top_once_json"] = json.loads(top.stdout) if top.returncode == 0 else top.stderr
        if top.returncode == 0:
            tp = {p["pid"]: p for g in res["top_once_json"]["gpus"] for p in g["processes"]}
            checks["top_json_shows_w_demo"] = tp.get(a.pid, {}).get("workload") == "w-demo"

        # -- exporter ------------------------------------------------------------------
        exp = subprocess.Popen(
            [*cli, "exporter", "--port", "9400"],
            env=base_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        body = ""
        end = time.time() + 60
        while time.time() < end and not body:
            try:
                with urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.3)
        t0 = time.perf_counter()
        with urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=5) as r:
            r.read()
        res["exporter_scrape_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        exp.send_signal(signal.SIGINT)
        try:
            res["exporter_output"] = exp.communicate(timeout=15)[0][-2000:]
        except subprocess.TimeoutExpired:
            exp.kill()
        (out / "metrics.txt").write_text(body)
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        res["metric_families"] = sorted(fams)
        dcgm = [
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE",
        ]
        checks["metrics_dcgm_series"] = all(
            n in fams
            and fams[n].samples
            and {"gpu", "UUID", "modelName", "Hostname"} <= set(fams[n].samples[0].labels)
            for n in dcgm
        )
        pm = fams.get("gpupool_gpu_process_memory_bytes")
        checks["metrics_process_series_w_demo"] = bool(
            pm and any(s.labels.get("workload") == "w-demo" for s in pm.samples)
        )
        ps = fams.get("gpupool_gpu_process_sm_util")
        sm_values = [x.value for x in ps.samples] if ps else []
        checks["metrics_process_sm_util_nonzero"] = any(v > 0 for v in sm_values)
        log("exporter", res["exporter_scrape_ms"], "ms", checks)

        # -- sampling cost on the real GPU, with the workers running --------------------
        sys.path.insert(0, str(HERE))
        import telemetry_overhead

        res["overhead_real"] = telemetry_overhead.real(60)
        calls = sh([sys.executable, str(HERE / "telemetry_nvml_calls.py"), "--samples", "100"])
        res["nvml_calls_busy"] = json.loads(calls.stdout) if calls.returncode == 0 else calls.stderr
        log("overhead real", res["overhead_real"])
        src.close()
    finally:
        stop(a)
        stop(b)

    # -- CUDA MPS -------------------------------------------------------------------------
    mps_env = {
        **base_env,
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/gpupool-mps/pipe",
        "CUDA_MPS_LOG_DIRECTORY": "/tmp/gpupool-mps/log",
    }
    for d in ("pipe", "log"):
        Path(f"/tmp/gpupool-mps/{d}").mkdir(parents=True, exist_ok=True)
    started = subprocess.run(
        ["nvidia-cuda-mps-control", "-d"],
        env=mps_env,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    res["mps_start_rc"] = started.returncode
    try:
        c, ready_c = start_worker("c", 1.0, {**mps_env, "GPUPOOL_WORKLOAD_ID": "w-mps"})
        try:
            wait_ready(ready_c, c)
            src = NVMLSource.open()
            sampler = Sampler(src, attributor=Attributor(resolve_workload=OWNERS))
            frames = sample_frames(sampler, 3)
            src.close()
            res["frames_mps"] = frames
            procs = frames[-1]["gpus"][0]["processes"]
            pc = next((p for p in procs if p["pid"] == c.pid), None)
            checks["mps_client_seen_as_mps"] = bool(pc and pc["kind"] == "mps")
            checks["mps_client_attributed"] = bool(pc and pc["workload"] == "w-mps")
            log(
                "mps processes", [(p["pid"], p["kind"], p["command"], p["workload"]) for p in procs]
            )
        finally:
            stop(c)
    finally:
        q = subprocess.run(
            ["nvidia-cuda-mps-control"],
            input="quit\n",
            env=mps_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        res["mps_quit"] = {"rc": q.returncode, "out": q.stdout + q.stderr}
        logf = Path("/tmp/gpupool-mps/log/control.log")
        res["mps_control_log_tail"] = logf.read_text()[-1500:] if logf.exists() else None

    res["all_ok"] = all(checks.values())
    (out / "gpu_verify.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    log("checks", json.dumps(checks, indent=1))
    return 0 if res["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
