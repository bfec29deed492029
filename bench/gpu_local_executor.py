"""Real-GPU check of the local executor and its MPS limits (run by bench/gpu_local_executor.sh).

1. binding: one job per GPU (whole share) sees exactly that GPU (count 1, its UUID);
2. MPS memory limit: GPU 0 in `shared` mode with a gpupool-managed MPS daemon; a fractional
   job with a 4 GiB share tries to allocate 8 GiB and must fail near 4 GiB, while a job
   inside its share (3 GiB) succeeds; a policed share (no MPS) allocates the 8 GiB.
Writes `gpu_local_executor.json` (every probe's output and the verdicts) to the output dir.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
from pathlib import Path

from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.mps import MPSManager
from gpupool.telemetry import open_source

PROBE = str(Path(__file__).with_name("gpu_probe.py"))
SHARE_MIB = 4096


def run(ex: LocalExecutor, wid: str, alloc: Allocation, *args: str) -> dict:
    w = Workload(id=wid, tenant="bench", owner="bench", command=(sys.executable, PROBE, *args))
    h = ex.start(w, alloc)
    child = ex._children[wid]
    child.wait(timeout=300)
    st = ex.poll(wid)
    lines = [ln for ln in ex.logs(wid).splitlines() if ln.startswith("{")]
    probe = json.loads(lines[-1]) if lines else {"log": ex.logs(wid)}
    return {
        "workload": wid,
        "exit_code": st.exit_code,
        "enforcement": {k: str(v) for k, v in h.enforcement.items()},
        "probe": probe,
    }


def main(out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    src = open_source(None)
    snap = src.snapshot()
    gpus = [(g.index, g.uuid, int(g.memory_total_bytes // 2**20)) for g in snap.gpus]
    work = Path(tempfile.mkdtemp(prefix="gpupool-bench-"))
    work.chmod(0o755)  # jobs run as another account (nobody) when this runs as root
    result: dict[str, object] = {
        "host": socket.gethostname(),
        "driver": snap.driver_version,
        "gpus": [
            {"index": i, "uuid": u, "memory_mib": m, "name": g.name}
            for (i, u, m), g in zip(gpus, snap.gpus, strict=True)
        ],
        "started": time.time(),
    }
    ex = LocalExecutor(work / "jobs", user_mode="single-user")
    binding = []
    for i, uuid, mem in gpus:
        a = Allocation(f"bind-{i}", "n", (Share("n", i, uuid, 1000, mem),), 0)
        r = run(ex, f"bind-{i}", a)
        r["ok"] = r["probe"].get("device_count") == 1 and r["probe"].get("uuids") == [uuid]
        binding.append(r)
    result["binding"] = binding

    i, uuid, mem = gpus[0]
    mgr = MPSManager(work / "mps")
    mps_ex = LocalExecutor(work / "mps-jobs", user_mode="single-user", mps=mgr)
    try:
        result["mps_daemon_healthy"] = mgr.ensure(uuid)
        share = Share("n", i, uuid, 250, SHARE_MIB, Enforcement.MPS)
        over = run(
            mps_ex,
            "mps-over",
            Allocation("mps-over", "n", (share,), 0),
            "--alloc-mib",
            str(2 * SHARE_MIB),
        )
        within = run(
            mps_ex,
            "mps-within",
            Allocation("mps-within", "n", (share,), 0),
            "--alloc-mib",
            str(SHARE_MIB - 1024),
        )
        policed_share = Share("n", i, uuid, 250, SHARE_MIB, Enforcement.POLICED)
        policed = run(
            mps_ex,
            "policed-over",
            Allocation("policed-over", "n", (policed_share,), 0),
            "--alloc-mib",
            str(2 * SHARE_MIB),
        )
        result["mps"] = {
            "share_mib": SHARE_MIB,
            "over": over,
            "within": within,
            "policed_over": policed,
            "status": [s.__dict__ if hasattr(s, "__dict__") else str(s) for s in mgr.status()],
        }
        over_mib = over["probe"].get("allocated_mib", -1)
        result["mps_limit_holds"] = (
            over["enforcement"].get(uuid) == "mps"
            and over["probe"].get("alloc_error") is not None
            and 0 < over_mib <= SHARE_MIB
        )
        result["mps_within_ok"] = within["probe"].get("allocated_mib") == SHARE_MIB - 1024
        result["policed_not_limited"] = policed["probe"].get("allocated_mib") == 2 * SHARE_MIB
    finally:
        mgr.stop_all()
    result["binding_ok"] = all(b["ok"] for b in binding)
    result["finished"] = time.time()
    (out_dir / "gpu_local_executor.json").write_text(json.dumps(result, indent=1, default=str))
    print(
        json.dumps(
            {
                k: v
                for k, v in result.items()
                if k.endswith(("_ok", "_holds", "_limited", "_healthy"))
            }
        )
    )
    ok = result["binding_ok"] and result.get("mps_limit_holds") and result.get("mps_within_ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu_local_executor")))
