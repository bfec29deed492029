"""Real-GPU check of notebooks' GPU environment on the local engine (issue 5, issue 31).

The local engine runs a notebook's server itself (`gpupool.engines.local.notebooks`): the
account, the GPU binding and the MPS variables are those of any local job. On a machine
with NVIDIA GPUs this checks, with a CUDA probe run as a `notebook` workload's command in
the server's place:

1. whole GPU: the process sees exactly the granted GPU (count 1, its UUID);
2. fractional profile under gpupool-managed CUDA MPS (a 1/4 share with 4 GiB): allocating
   past the share fails near 4 GiB, allocating inside it works.

    PYTHONPATH=src python3 bench/hub_gpu_check.py OUT_DIR

JupyterHub itself is not needed here (the probe stands in for the kernel); the hub flow is
covered by tests/jupyterhub on simulated GPUs. As root the probe runs as the account gpupool
makes for its owner, which must be able to run this Python. Writes
OUT_DIR/hub_gpu_check.json.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.common.executor import ExecState
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


def probe_notebook(
    ex: LocalExecutor, wid: str, req: Request, allocation: Allocation, *args: str
) -> dict:
    """Run the probe as notebook `wid`'s server, as the local engine runs notebooks."""
    command = (sys.executable, PROBE, *args)
    ex.start(
        Workload(wid, "lab", "alice", req, kind=WorkloadKind.NOTEBOOK, command=command),
        allocation,
    )
    deadline = time.monotonic() + 300
    while (st := ex.poll(wid)).state in (ExecState.RUNNING, ExecState.STARTING):
        if time.monotonic() > deadline:
            ex.stop(wid, "timed out", 0)
            break
        time.sleep(0.2)  # a real process on a real GPU: bounded by the deadline
    log = ex.logs(wid)
    lines = [ln for ln in log.splitlines() if ln.startswith("{")]
    spec = json.loads((ex.state_dir / wid / "spec.json").read_text())
    return {
        "enforcement": spec["enforcement"],
        "exit_code": st.exit_code,
        "probe": json.loads(lines[-1]) if lines else {"log": log[-2000:]},
    }


def main(out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpupool-hub-gpu-"))
    work.chmod(0o755)  # jobs run as another account when this runs as root
    found = gpus()
    result: dict[str, object] = {"host": socket.gethostname(), "gpus": found, "at": time.time()}

    ex = LocalExecutor(work / "jobs", user_mode="single-user")
    binding = []
    for i, uuid, mem in found:
        wid = f"nb-bind-{i}"
        alloc = Allocation(wid, "n", (Share("n", i, uuid, 1000, mem),), 0)
        r = probe_notebook(ex, wid, Request(gpus=1), alloc)
        r["ok"] = r["probe"].get("device_count") == 1 and r["probe"].get("uuids") == [uuid]
        binding.append(r)
    result["binding"] = binding
    result["binding_ok"] = all(b["ok"] for b in binding)

    i, uuid, _ = found[0]
    mgr = MPSManager(work / "mps")
    mps_ex = LocalExecutor(work / "mps-jobs", user_mode="single-user", mps=mgr)
    try:
        result["mps_daemon_healthy"] = mgr.ensure(uuid)
        share = Share("n", i, uuid, 250, SHARE_MIB, Enforcement.MPS)
        req = Request(gpu_milli=250, gpu_memory_mib=SHARE_MIB)
        over = probe_notebook(
            mps_ex, "nb-over", req, Allocation("nb-over", "n", (share,), 0),
            "--alloc-mib", str(2 * SHARE_MIB),
        )  # fmt: skip
        within = probe_notebook(
            mps_ex, "nb-within", req, Allocation("nb-within", "n", (share,), 0),
            "--alloc-mib", str(SHARE_MIB - 1024),
        )  # fmt: skip
        result["mps"] = {"share_mib": SHARE_MIB, "over": over, "within": within}
        over_mib = over["probe"].get("allocated_mib", -1)
        result["mps_limit_holds"] = (
            over["enforcement"].get(uuid) == "mps"
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
