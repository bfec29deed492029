"""The job side of bench/multi_gpu_check.py (issue 21): what runs inside gpupool's jobs.

Every mode prints JSON lines `{"tag": ..., ...}` that the check reads from the job's log.

    view      the GPUs this job sees: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, the UUIDs
              PyTorch enumerates, `nvidia-smi -L`; with --hold-mib it then holds that much
              GPU memory (and light work) until --release exists or --max-hold passes.
    mps       CUDA MPS limits (bench/gpu_probe.py in child processes): allocate inside
              --limit-mib (must work), then past it (must fail near it), then hold a client
              on the GPU until released.
    ddp-launch  refuses to start unless NVLink multicast is off in its environment, then
              runs `torch.distributed.run --standalone --nproc_per_node 2 ... ddp`.
    ddp       one DDP rank (NCCL): checks the same variables before NCCL initializes, trains
              a small MLP until at least --min-steps and the release (or --max-seconds),
              then all-reduces rank+1 (2 ranks: 3.0) and compares parameters across ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid

MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def emit(tag: str, **data: object) -> None:
    print(json.dumps({"tag": tag, "pid": os.getpid(), "at": time.time(), **data}), flush=True)


def multicast_env() -> tuple[bool, dict[str, str | None]]:
    seen = {k: os.environ.get(k) for k in MULTICAST_OFF}
    return all(seen[k] == v for k, v in MULTICAST_OFF.items()), seen


def released(path: str | None, started: float, max_hold: float) -> bool:
    return (path is not None and os.path.exists(path)) or time.time() - started > max_hold


def torch_uuid(torch: object, index: int) -> str:
    """Device `index`'s UUID as NVML writes it (PyTorch's str() has no GPU- prefix)."""
    raw = str(torch.cuda.get_device_properties(index).uuid)  # type: ignore[attr-defined]
    return "GPU-" + str(uuid.UUID(raw.removeprefix("GPU-")))


def smi_list() -> list[str]:
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines() or [r.stderr.strip()]
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"nvidia-smi failed: {e}"]


def view(a: argparse.Namespace) -> int:
    out: dict[str, object] = {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "NVIDIA_VISIBLE_DEVICES": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "GPUPOOL_WORKLOAD_ID": os.environ.get("GPUPOOL_WORKLOAD_ID"),
        "user": os.environ.get("USER"),
        "uid": os.getuid(),
        "multicast_off": multicast_env()[0],
        "nvidia_smi_L": smi_list(),
    }
    try:
        import torch

        n = torch.cuda.device_count()
        out["torch_count"] = n
        out["torch_uuids"] = [torch_uuid(torch, i) for i in range(n)]
    except Exception as e:  # noqa: BLE001 - reported, the check decides
        out["torch_error"] = f"{type(e).__name__}: {e}"
        emit("view", **out)
        started = time.time()
        while a.hold_mib and not released(a.release, started, a.max_hold):
            time.sleep(0.2)  # the checker still reads this job's place (and ends it)
        return 1
    emit("view", **out)
    if not a.hold_mib or not out["torch_count"]:
        return 0 if out["torch_count"] else 1
    started = time.time()
    held = torch.empty(a.hold_mib << 20, dtype=torch.uint8, device="cuda:0")
    x = torch.randn(1024, 1024, device="cuda:0")
    torch.cuda.synchronize()
    emit("held", mib=a.hold_mib, bytes=held.numel())
    while not released(a.release, started, a.max_hold):
        x = torch.tanh(x @ x)  # a little work, so the GPU is not idle
        torch.cuda.synchronize()
        time.sleep(0.05)
    return 0


def probe(a: argparse.Namespace, *args: str) -> dict:
    r = subprocess.run(
        [sys.executable, a.probe, *args], capture_output=True, text=True, timeout=120
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    got = json.loads(lines[-1]) if lines else {"stderr": r.stderr[-1000:]}
    got["exit_code"] = r.returncode
    return got


def mps(a: argparse.Namespace) -> int:
    started = time.time()
    within = probe(a, "--alloc-mib", str(a.limit_mib - 1024))
    over = probe(a, "--alloc-mib", str(2 * a.limit_mib))
    emit("mps", limit_mib=a.limit_mib, within=within, over=over)
    holder = subprocess.Popen(
        [sys.executable, a.probe, "--alloc-mib", "1024", "--hold-s", str(a.max_hold)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = holder.stdout.readline() if holder.stdout else ""
    emit("holding", holder_pid=holder.pid, probe=line.strip())
    while not released(a.release, started, a.max_hold):
        time.sleep(0.2)
    alive = holder.poll() is None
    holder.terminate()
    holder.wait(30)
    emit("done", holder_alive_until_release=alive)
    return 0 if within.get("exit_code") == 0 and within.get("allocated_mib") else 1


def ddp_launch(a: argparse.Namespace) -> int:
    ok, seen = multicast_env()
    emit("ddp-env", ok=ok, seen=seen, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES"))
    if not ok:
        print(
            "NVLink multicast is not off in this job's environment: refusing to start", flush=True
        )
        return 3
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        os.path.abspath(__file__),
        "ddp",
        "--min-steps",
        str(a.min_steps),
        "--max-seconds",
        str(a.max_seconds),
    ] + (["--release", a.release] if a.release else [])
    os.execv(sys.executable, argv)
    return 127  # not reached


def ddp(a: argparse.Namespace) -> int:
    ok, seen = multicast_env()
    if not ok:  # before anything can initialize NCCL
        print(f"NVLink multicast variables not set {seen}: aborting", flush=True)
        return 3
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    world = dist.get_world_size()
    emit(
        "ddp-rank",
        rank=rank,
        world=world,
        multicast_off=ok,
        uuid=torch_uuid(torch, local),
    )
    torch.manual_seed(rank)  # different data per rank; DDP makes the parameters agree
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, 16),
    ).to(dev)
    torch.manual_seed(0)
    for p in model.parameters():  # the same start on every rank
        torch.nn.init.normal_(p, std=0.02)
    net = DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(512, 2048, device=dev) + rank
    y = torch.randint(0, 16, (512,), device=dev)
    started, steps, loss = time.time(), 0, torch.zeros(())
    stop = torch.zeros(1, device=dev)
    while True:
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps % 20 == 0:
            done = steps >= a.min_steps and released(a.release, started, a.max_seconds)
            stop.fill_(1.0 if done else 0.0)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
            if stop.item() > 0:
                break
    total = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(total)
    check = torch.stack(
        [torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum()]
    )
    hi, lo = check.clone(), -check.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MAX)
    spread = float(hi.item() + lo.item())
    if rank == 0:
        emit(
            "ddp",
            world=world,
            steps=steps,
            seconds=round(time.time() - started, 2),
            loss=float(loss.item()),
            allreduce=total.tolist(),
            expected=world * (world + 1) / 2,
            param_checksum=float(check.item()),
            param_spread=spread,
        )
    dist.destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["view", "mps", "ddp-launch", "ddp"])
    ap.add_argument("--hold-mib", type=int, default=0)
    ap.add_argument("--limit-mib", type=int, default=4096)
    ap.add_argument("--probe", default=os.path.join(os.path.dirname(__file__), "gpu_probe.py"))
    ap.add_argument("--release", help="hold (or train) until this file exists")
    ap.add_argument("--max-hold", type=float, default=120.0)
    ap.add_argument("--min-steps", type=int, default=300)
    ap.add_argument("--max-seconds", type=float, default=90.0)
    a = ap.parse_args()
    return {"view": view, "mps": mps, "ddp-launch": ddp_launch, "ddp": ddp}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
