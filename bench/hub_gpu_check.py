"""Real-GPU check of hub-launched notebooks' GPU environment (issue 5).

The notebook's process gets the environment `HubLaunchExecutor` grants (what GpupoolSpawner
adds to JupyterHub's own environment). On a machine with NVIDIA GPUs this checks, with a
CUDA probe process started exactly as the spawner starts the notebook server:

1. whole GPU: the process sees exactly the granted GPU (count 1, its UUID);
2. fractional profile under gpupool-managed CUDA MPS (a 1/4 share with 4 GiB): allocating
   past the share fails near 4 GiB, allocating inside it works.

    PYTHONPATH=src python3 bench/hub_gpu_check.py OUT_DIR

JupyterHub itself is not needed here (the probe stands in for the kernel); the hub flow is
covered by tests/jupyterhub on simulated GPUs. Writes OUT_DIR/hub_gpu_check.json.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.common.hub_launch import HubLaunchExecutor
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.mps import MPSManager

PROBE = str(Path(__file__).with_name("gpu_probe.py"))
SHARE_MIB = 4096


def gpus() -> list[tuple[int, str, int]]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split(", ") for line in out.strip().splitlines()]
    return [(int(i), u, int(m)) for i, u, m in rows]


def notebook(wid: str, req: Request) -> Workload:
    return Workload(id=wid, tenant="lab", owner="alice", kind=WorkloadKind.NOTEBOOK, request=req)


def probe_with_grant(ex: HubLaunchExecutor, wid: str, *args: str) -> dict:
    """Start the probe the way GpupoolSpawner starts the notebook: hub env + grant env."""
    grant = ex.dir.grant(wid)
    assert grant is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "GPUPOOL_"))}
    env.update(grant.env)
    proc = subprocess.run(
        [sys.executable, PROBE, *args], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return {
        "grant_env": grant.env,
        "enforcement": grant.enforcement,
        "exit_code": proc.returncode,
        "probe": json.loads(lines[-1]) if lines else {"stderr": proc.stderr[-2000:]},
    }


def main(out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpupool-hub-gpu-"))
    work.chmod(0o755)  # jobs run as another account when this runs as root
    found = gpus()
    result: dict[str, object] = {"host": socket.gethostname(), "gpus": found, "at": time.time()}

    ex = HubLaunchExecutor(LocalExecutor(work / "jobs", user_mode="single-user"), work / "launch")
    binding = []
    for i, uuid, mem in found:
        wid = f"nb-bind-{i}"
        ex.start(
            notebook(wid, Request(gpus=1)),
            Allocation(wid, "n", (Share("n", i, uuid, 1000, mem),), 0),
        )
        r = probe_with_grant(ex, wid)
        r["ok"] = r["probe"].get("device_count") == 1 and r["probe"].get("uuids") == [uuid]
        binding.append(r)
    result["binding"] = binding
    result["binding_ok"] = all(b["ok"] for b in binding)

    i, uuid, _ = found[0]
    mgr = MPSManager(work / "mps")
    mps_ex = HubLaunchExecutor(
        LocalExecutor(work / "mps-jobs", user_mode="single-user", mps=mgr), work / "mps-launch"
    )
    try:
        result["mps_daemon_healthy"] = mgr.ensure(uuid)
        share = Share("n", i, uuid, 250, SHARE_MIB, Enforcement.MPS)
        req = Request(gpu_milli=250, gpu_memory_mib=SHARE_MIB)
        mps_ex.start(notebook("nb-over", req), Allocation("nb-over", "n", (share,), 0))
        over = probe_with_grant(mps_ex, "nb-over", "--alloc-mib", str(2 * SHARE_MIB))
        mps_ex.start(notebook("nb-within", req), Allocation("nb-within", "n", (share,), 0))
        within = probe_with_grant(mps_ex, "nb-within", "--alloc-mib", str(SHARE_MIB - 1024))
        result["mps"] = {"share_mib": SHARE_MIB, "over": over, "within": within}
        over_mib = over["probe"].get("allocated_mib", -1)
        result["mps_limit_holds"] = (
            over["enforcement"].get(uuid) == "mps"
            and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in over["grant_env"]
            and over["probe"].get("alloc_error") is not None
            and 0 < over_mib <= SHARE_MIB
        )
        result["mps_within_ok"] = within["probe"].get("allocated_mib") == SHARE_MIB - 1024
    finally:
        mgr.stop_all()
    (out_dir / "hub_gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    verdicts = {k: v for k, v in result.items() if k.endswith(("_ok", "_holds", "_healthy"))}
    print(json.dumps(verdicts))
    ok = result["binding_ok"] and result.get("mps_limit_holds") and result.get("mps_within_ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/hub_gpu_check")))
