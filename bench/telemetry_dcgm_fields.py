"""Real-GPU check of the DCGM dashboard fields gpupool takes from NVML (issue 17, item 6).

For every GPU: `DCGM_FI_DEV_SM_CLOCK` and `DCGM_FI_DEV_MEM_CLOCK` (MHz) and
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ) read straight from NVML (nvidia-ml-py) and from the
/metrics of a real `gpupool exporter` process, side by side. Checks: every field is on /metrics;
the clocks are MHz values (0 < v < 10 000; they move with load, so they are shown beside NVML's
reads rather than compared); the energy on /metrics lies between NVML's reads before and after
the scrape; and the energy's rate between two scrapes, in mJ/s / 1000, matches the
power NVML reports (W) within 25 %, which confirms the unit is millijoules like DCGM's.

    PYTHONPATH=src python bench/telemetry_dcgm_fields.py [--out DIR]

Writes DIR/dcgm_fields.json (or $OUT/dcgm_fields.json) and exits 1 if a check fails. Idle GPUs
are fine (the power then is the idle draw); nothing is changed on the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pynvml
from prometheus_client.parser import text_string_to_metric_families

FIELDS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_POWER_USAGE",
)


def nvml_reads() -> dict[str, dict[str, float]]:
    """UUID -> the four fields straight from NVML."""
    out = {}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        out[uuid] = {
            "DCGM_FI_DEV_SM_CLOCK": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "DCGM_FI_DEV_MEM_CLOCK": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
            ),
            "DCGM_FI_DEV_POWER_USAGE": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
    return out


def scrape(url: str) -> dict[str, dict[str, float]]:
    """UUID -> the four fields from gpupool's /metrics."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in FIELDS:
            for s in fam.samples:
                out.setdefault(s.labels["UUID"], {})[fam.name] = s.value
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        print(f"no NVIDIA GPU answers NVML here ({e}); run this on a GPU host", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/metrics"
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gpupool.cli.main import run; run()",
            "exporter",
            "--port",
            str(port),
        ],
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                scrape(url)
                break
            except OSError:
                if exporter.poll() is not None or time.monotonic() > deadline:
                    print("gpupool exporter did not serve /metrics", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        time.sleep(1.5)  # a fresh sample (the exporter samples every second)
        before = nvml_reads()
        m1, t1 = scrape(url), time.monotonic()
        after = nvml_reads()
        time.sleep(10)  # an energy difference well above the counter's resolution
        m2, t2 = scrape(url), time.monotonic()
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
    failures: list[str] = []
    report = []
    print(f"{'GPU':<42} {'field':<38} {'NVML':>16} {'/metrics':>16}")
    for uuid, raw in before.items():
        got = m1.get(uuid, {})
        for f in FIELDS[:3]:
            print(f"{uuid:<42} {f:<38} {raw[f]:>16.0f} {got.get(f, float('nan')):>16.0f}")
            if f not in got:
                failures.append(f"{uuid}: {f} missing on /metrics")
        lo_e = raw["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        hi_e = after[uuid]["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        e = got.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        # the exporter's sample may be up to a second older than `before`
        slack = 2.0 * 1000 * max(raw["DCGM_FI_DEV_POWER_USAGE"], 1.0)
        if e is not None and not (lo_e - slack <= e <= hi_e):
            failures.append(f"{uuid}: energy {e} not within NVML's [{lo_e - slack}, {hi_e}]")
        for f in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"):
            v = got.get(f)
            seen = (raw[f], after[uuid][f])
            if v is not None and not (0 < v < 10_000):
                failures.append(f"{uuid}: {f} = {v} MHz is not a clock")
            report.append({"gpu": uuid, "field": f, "nvml": seen, "metrics": v})
        e2 = m2.get(uuid, {}).get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        power = (raw["DCGM_FI_DEV_POWER_USAGE"] + after[uuid]["DCGM_FI_DEV_POWER_USAGE"]) / 2
        if e is not None and e2 is not None and t2 > t1:
            watts = (e2 - e) / (t2 - t1) / 1000.0
            print(
                f"{uuid:<42} {'energy rate (mJ/s / 1000) vs power W':<38} {power:>16.1f} "
                f"{watts:>16.1f}"
            )
            if not (0.75 * power <= watts <= 1.25 * power):
                failures.append(
                    f"{uuid}: energy rises {watts:.1f} W but NVML draws {power:.1f} W: not mJ?"
                )
            report.append({"gpu": uuid, "energy_rate_w": watts, "power_w": power})
        report.append(
            {"gpu": uuid, "field": "energy_mj", "nvml": (lo_e, hi_e), "metrics": e, "second": e2}
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dcgm_fields.json").write_text(
        json.dumps({"checks": report, "failures": failures}, indent=2)
    )
    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
