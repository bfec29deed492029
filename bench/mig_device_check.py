"""Real-GPU check of MIG (issue 18), reading only: it never changes a GPU's MIG mode.

(a) reads each GPU's MIG mode (nvmlDeviceGetMigMode) and MIG devices through gpupool's own
    telemetry (gpupool.telemetry.nvml.NVMLSource) and prints them;
(b) starts gpupool in-process on this host's real GPUs (the local engine, its API and its
    telemetry loop; SQLite in a temporary directory, no loops running on their own), then
    for every GPU whose MIG mode is off asks `PATCH /api/v1/gpus/{uuid} {"sharing": "mig"}`
    as the admin and checks that it is refused with a 4xx problem whose message says what to
    do (`nvidia-smi -i N -mig 1`), and that the GPU's sharing mode is unchanged. A GPU whose
    MIG mode is on is instead checked to be offered as `mig` with the layout its MIG devices
    form (when NVML tells their profiles and starts).

Writes `mig_device_check.json` and `mig_device_check.md` to OUT_DIR; exit code 0 when every
check passes. `--simulate SPEC` runs the same on simulated GPUs (CI, no GPU needed), e.g.
`--simulate 1xH100-80GB,1xH100-80GB:mig=all-3g.40gb`.

    python bench/mig_device_check.py OUT_DIR [--simulate SPEC]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ADMIN_PASSWORD = "mig-device-check-admin"


def read_mig_modes(simulate: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(host facts, per GPU: index, uuid, name, mig_enabled, MIG devices) through gpupool's
    telemetry source (NVML, or the simulated one)."""
    from gpupool.telemetry import open_source

    src = open_source(simulate, hostname=socket.gethostname())
    try:
        snap = src.snapshot()
    finally:
        src.close()
    host = {
        "hostname": snap.hostname,
        "driver_version": snap.driver_version,
        "nvml_version": snap.nvml_version,
        "simulated": snap.simulated,
    }
    gpus = [
        {
            "index": g.index,
            "uuid": g.uuid,
            "name": g.name,
            "mig_enabled": g.mig_enabled,
            "mig_layout": g.mig_layout(),
            "mig_devices": [
                {"uuid": d.uuid, "profile": d.profile, "start": d.start} for d in g.mig_devices
            ],
            "errors": list(g.errors),
        }
        for g in snap.gpus
    ]
    return host, gpus


def check_api(simulate: str | None, work: Path) -> list[dict[str, Any]]:
    """Start gpupool in-process on this host's GPUs; the checks of (b), one dict each."""
    from fastapi.testclient import TestClient

    from gpupool.clock import SystemClock
    from gpupool.engines.local.engine import LocalEngine, LocalOptions
    from gpupool.server.services.accounts import issue_token
    from gpupool.server.settings import Settings
    from gpupool.system import SystemSettings, build_system

    settings = SystemSettings(
        server=Settings(database_url=f"sqlite:///{work / 'gpupool.db'}", start_loops=False),
        data_dir=work / "data",
        admin="admin",
        admin_password=ADMIN_PASSWORD,
    )
    options = LocalOptions(
        node=socket.gethostname(), simulate=simulate, user_mode="single-user", mps="off"
    )
    engine = LocalEngine(options)
    system = build_system(settings, engine, clock=SystemClock())
    checks: list[dict[str, Any]] = []
    try:
        ctx = system.ctx
        ctx.loops.get("telemetry").run_once()  # a reading of every GPU, MIG mode included
        auth = {"Authorization": f"Bearer {issue_token(ctx, 'admin', 'mig-check', None).token}"}
        client = TestClient(system.app)
        gpus = client.get("/api/v1/gpus", headers=auth).json()
        readings = {g.uuid: g for g in ctx.samplers[0].latest.snapshot.gpus}
        for g in gpus:
            r = readings.get(g["uuid"])
            mig_on = r.mig_enabled if r is not None else None
            if mig_on is True:
                layout = r.mig_layout()
                ok = g["sharing"] == "mig" and (layout is None or g["mig_layout"] == layout)
                checks.append(
                    {
                        "gpu": g["index"],
                        "check": "a GPU in MIG mode is offered as mig with its devices' layout",
                        "mig_enabled": True,
                        "sharing": g["sharing"],
                        "mig_layout": g["mig_layout"],
                        "ok": ok,
                    }
                )
                continue
            t0 = time.perf_counter()
            resp = client.patch(f"/api/v1/gpus/{g['uuid']}", headers=auth, json={"sharing": "mig"})
            ms = (time.perf_counter() - t0) * 1000
            body = resp.json() if resp.headers.get("content-type", "").endswith("json") else {}
            detail = str(body.get("detail", resp.text))
            after = client.get(f"/api/v1/gpus/{g['uuid']}", headers=auth).json()["sharing"]
            says_what_to_do = f"nvidia-smi -i {g['index']} -mig 1" in detail
            ok = (
                mig_on is False
                and 400 <= resp.status_code < 500
                and resp.headers.get("content-type", "").startswith("application/problem+json")
                and says_what_to_do
                and after == g["sharing"]
            )
            checks.append(
                {
                    "gpu": g["index"],
                    "check": "mig sharing on a GPU whose MIG mode is off is refused, saying "
                    "what to do; the sharing mode is unchanged",
                    "mig_enabled": mig_on,
                    "status": resp.status_code,
                    "content_type": resp.headers.get("content-type"),
                    "detail": detail,
                    "sharing_before": g["sharing"],
                    "sharing_after": after,
                    "answer_ms": round(ms, 1),
                    "ok": ok,
                }
            )
    finally:
        system.stop()
        engine.close()
    return checks


def markdown(result: dict[str, Any]) -> str:
    h = result["host"]
    lines = [
        "# MIG device check (bench/mig_device_check.py)",
        "",
        f"- host: {h['hostname']}, driver {h['driver_version']}, NVML {h['nvml_version']}"
        + (" — **SIMULATED GPUs**" if h["simulated"] else ""),
        f"- run at: {result['at']}",
        f"- verdict: **{'PASS' if result['ok'] else 'FAIL'}**",
        "",
        "## (a) MIG mode through gpupool's NVML telemetry",
        "",
        "| GPU | name | MIG mode | MIG devices |",
        "|---|---|---|---|",
    ]
    for g in result["gpus"]:
        mode = {True: "enabled", False: "disabled", None: "unknown"}[g["mig_enabled"]]
        devs = ", ".join(f"{d['profile']}@{d['start']}" for d in g["mig_devices"]) or "—"
        lines.append(f"| {g['index']} | {g['name']} | {mode} | {devs} |")
    lines += ["", "## (b) the API on this host's GPUs", ""]
    for c in result["checks"]:
        mark = "ok" if c["ok"] else "FAILED"
        lines.append(f"- GPU {c['gpu']}: {c['check']}: **{mark}**")
        if "status" in c:
            lines.append(f"  - HTTP {c['status']} ({c['content_type']}), {c['answer_ms']} ms")
            lines.append(f"  - message: {c['detail']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--simulate", default=None, help="simulated GPUs instead of NVML (CI)")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    host, gpus = read_mig_modes(args.simulate)
    for g in gpus:
        mode = {True: "enabled", False: "disabled", None: "unknown"}[g["mig_enabled"]]
        print(f"GPU {g['index']} {g['name']} ({g['uuid']}): MIG mode {mode}")
    with tempfile.TemporaryDirectory(prefix="gpupool-mig-check-") as tmp:
        checks = check_api(args.simulate, Path(tmp))
    for c in checks:
        print(f"GPU {c['gpu']}: {'ok' if c['ok'] else 'FAILED'}: {c['check']}")
        if "detail" in c:
            print(f"  HTTP {c['status']}: {c['detail']}")
    result = {
        "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "host": host,
        "gpus": gpus,
        "checks": checks,
        "ok": bool(checks) and all(c["ok"] for c in checks),
    }
    (args.out_dir / "mig_device_check.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out_dir / "mig_device_check.md").write_text(markdown(result))
    print(f"{'PASS' if result['ok'] else 'FAIL'}: results in {args.out_dir}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
