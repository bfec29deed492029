"""Spawn latency of GPU notebooks through JupyterHub + gpupool (issue 5's targets).

Measures, on a real gpupool server + JupyterHub + configurable-http-proxy with 2 simulated
GPUs (the stack of tests/jupyterhub/stack.py):

- free GPU: hub spawn request (REST) -> JupyterLab answers through the proxy
  (target <= 3 s), split into "gpupool admitted + the engine started the notebook server"
  and "notebook server up";
- queued: the GPU holder is stopped -> the queued notebook is admitted by gpupool
  (server timestamps; target <= 1 s) -> the local engine starts its server -> JupyterLab
  answers.

    python bench/spawn_latency.py [--rounds 5] [--out bench/results/spawn_latency]

Writes <out>.json (raw rounds) and <out>.md (summary), stamped with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.jupyterhub.stack import Stack, build, wait_for  # noqa: E402

SPAWN_S = 300


def _lab_up(stack: Stack, user: str) -> bool:
    m = stack.ready(user)
    if not m:
        return False
    url = stack.hub.public_url + m["url"] + "lab"
    r = httpx.get(url, headers={"Authorization": f"token {stack.driver_token}"}, timeout=30)
    return r.status_code == 200


def _workload(stack: Stack, user: str) -> dict:
    return max(stack.notebooks(user), key=lambda w: w["submitted_at"])


def _process_started(stack: Stack, w: dict) -> float:
    """When the local engine started the notebook's server (its job spec)."""
    spec = json.loads((stack.executor.state_dir / w["id"] / "spec.json").read_text())
    return float(spec["started_at"])


def free_gpu_round(stack: Stack, user: str) -> dict:
    t0 = time.time()
    r = stack.spawn(user, {"profile": "gpu"})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: _lab_up(stack, user), f"{user}'s JupyterLab", SPAWN_S, 0.05)
    t_ready = time.time()
    w = _workload(stack, user)
    started = _process_started(stack, w)
    return {
        "spawn_to_lab_s": t_ready - t0,
        "request_to_admitted_s": w["admitted_at"] - t0,
        "request_to_process_started_s": started - t0,
        "process_started_to_lab_s": t_ready - started,
    }


def queued_round(stack: Stack, holder: str, waiter: str) -> dict:
    r = stack.spawn(waiter, {"profile": "gpu"})
    assert r.status_code == 202, r.text
    wait_for(lambda: _workload(stack, waiter)["state"] == "pending", "the waiter to queue", 60)
    t_stop = time.time()
    assert stack.hub_api("DELETE", f"/users/{holder}/server").status_code in (202, 204)
    wait_for(lambda: _lab_up(stack, waiter), f"{waiter}'s JupyterLab", SPAWN_S, 0.05)
    t_ready = time.time()
    released = _workload(stack, holder)["finished_at"]
    w = _workload(stack, waiter)
    started = _process_started(stack, w)
    return {
        "release_to_admitted_s": w["admitted_at"] - released,
        "stop_request_to_admitted_s": w["admitted_at"] - t_stop,
        "admitted_to_process_started_s": started - w["admitted_at"],
        "release_to_lab_s": t_ready - released,
    }


def _stop(stack: Stack, user: str) -> None:
    stack.hub_api("DELETE", f"/users/{user}/server")
    wait_for(lambda: not stack.server_model(user), f"{user} to stop", 60)


def _summary(rows: list[dict]) -> dict:
    out = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        out[key] = {
            "median": statistics.median(vals),
            "min": min(vals),
            "max": max(vals),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="bench/results/spawn_latency")
    args = ap.parse_args()
    machine = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpus": "2 simulated",
    }
    free, queued = [], []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-hub-") as tmp:
        stack = build(Path(tmp), hub_poll_s=5)
        try:
            for u in ("alice", "bob", "carol"):
                stack.login(u)
            for i in range(args.rounds):
                free.append(free_gpu_round(stack, "alice"))
                # bob holds the other GPU, carol waits for alice's
                if i == 0:
                    free.append(free_gpu_round(stack, "bob"))
                queued.append(queued_round(stack, "alice", "carol"))
                _stop(stack, "carol")
                print(f"round {i + 1}: free {free[-1]}, queued {queued[-1]}", flush=True)
        finally:
            stack.close()
    result = {
        "machine": machine,
        "free_gpu": {"rounds": free, "summary": _summary(free)},
        "queued": {"rounds": queued, "summary": _summary(queued)},
        "targets": {"spawn_to_lab_s": 3.0, "release_to_admitted_s": 1.0},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    lines = [
        "# Notebook spawn latency (JupyterHub + gpupool)",
        "",
        f"Machine: {machine['platform']}, {machine['cpus']} CPUs, Python {machine['python']}, "
        f"{machine['gpus']} GPUs. {args.rounds} rounds. Seconds.",
        "",
        "| measure | median | min | max | target |",
        "|---|---|---|---|---|",
    ]
    for part in ("free_gpu", "queued"):
        for key, s in result[part]["summary"].items():
            target = result["targets"].get(key, "")
            lines.append(
                f"| {part}: {key} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} "
                f"| {target} |"
            )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
