"""What NVML reports about the processes of GPU 0 while MPS clients run (evidence for the
"busy time under MPS" rule, docs/telemetry.md): every --every seconds, one JSON line with
the compute and MPS process lists (pid, program, memory), the per-process utilization
samples newer than the last read (pid, SM %), and the GPU's utilization. Runs beside
bench/energy_gpu_check.sh on the device tool's machine; stops after --seconds."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def program(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").rsplit("/", 1)[-1] or None


def procs(fn, h) -> list[dict] | str:
    try:
        return [{"pid": p.pid, "program": program(p.pid), "mem": p.usedGpuMemory} for p in fn(h)]
    except Exception as e:  # noqa: BLE001 - record what NVML said
        return f"error: {e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--every", type=float, default=2.0)
    a = ap.parse_args()
    import pynvml as n

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    last = 0
    end = time.monotonic() + a.seconds
    with open(a.out, "w") as f:
        while time.monotonic() < end:
            row: dict[str, object] = {"t": round(time.time(), 2)}
            row["util_gpu"] = n.nvmlDeviceGetUtilizationRates(h).gpu
            row["compute"] = procs(n.nvmlDeviceGetComputeRunningProcesses, h)
            row["mps"] = procs(n.nvmlDeviceGetMPSComputeRunningProcesses, h)
            try:
                samples = n.nvmlDeviceGetProcessUtilization(h, last)
                row["proc_util"] = [
                    {"pid": s.pid, "sm": s.smUtil, "ts": s.timeStamp} for s in samples
                ]
                last = max([last, *(s.timeStamp for s in samples)])
            except Exception as e:  # noqa: BLE001 - NOT_FOUND when no samples are new
                row["proc_util"] = f"error: {e}"
            f.write(json.dumps(row) + "\n")
            f.flush()
            time.sleep(a.every)  # a fixed pace for a probe, nothing waits on it


if __name__ == "__main__":
    main()
