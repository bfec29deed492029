"""One tenant of `bench/sharing.py`: a GPU job started by gpupool's local executor.

Three roles (the first argument):

- ``throughput``: for each phase (``small``: an MLP training loop, batch 64, that leaves the GPU
  underused; ``matmul``: 8192x8192 bf16 matmuls that saturate it) warm up, say ready
  (``<sync>/ready-<phase>-<name>``), wait for ``<sync>/go-<phase>`` (which holds the common start
  time), then count iterations until start + duration. Iterations/s go to ``--out``.
- ``checked``: fp32 matmuls of small integers, whose every result is known exactly; each one is
  compared with its expected value. Holds ``--hold-mib`` of memory inside its share. Runs until
  ``<sync>/stop`` appears. Reports iterations, mismatches and a checksum against its expected value.
- ``hog``: allocates ``--step-mib`` chunks up to ``--target-mib`` (past its share). Under MPS the
  driver refuses past the share (exit 3, CUDA out of memory); otherwise it reaches the target and
  holds it until stopped. Progress is rewritten to ``--out`` after every chunk.

Needs PyTorch and a GPU; exits 2 with a message otherwise. No gpupool import (the executor's env
is all it needs: CUDA_VISIBLE_DEVICES, GPUPOOL_WORKLOAD_ID, the CUDA_MPS_* limits).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MIB = 1 << 20
ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "GPUPOOL_WORKLOAD_ID",
    "GPUPOOL_GPU_MILLI",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
)


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def wait_for(path: Path, timeout_s: float) -> str:
    """Poll for a file the coordinator writes (a barrier, not a timing)."""
    deadline = time.time() + timeout_s
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s:.0f} s")
        time.sleep(0.01)
    return path.read_text()


def facts(torch) -> dict:
    if torch is None:  # --fake
        env = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
        return {"pid": os.getpid(), "env": env, "device": "fake (no GPU: --fake)"}
    props = torch.cuda.get_device_properties(0)
    return {
        "pid": os.getpid(),
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "device": props.name,
        "multiprocessors_seen": props.multi_processor_count,
        "torch": torch.__version__,
    }


# -- throughput ------------------------------------------------------------------------------
def make_small(torch):
    """An MLP training step with batch 64: a few µs of GPU work per kernel, launch bound."""
    g = torch.Generator(device="cuda").manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512, device="cuda", generator=g)
    y = torch.randint(0, 10, (64,), device="cuda", generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step, 10  # iterations between synchronizations


def make_matmul(torch, size: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16, generator=g)
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        torch.matmul(a, b, out=c)

    return step, 4


def run_for(torch, step, chunk: int, until: float) -> tuple[int, float]:
    """Run `chunk` steps between synchronizations until `until`; (iterations, end time)."""
    n = 0
    while True:
        for _ in range(chunk):
            step()
        if torch is not None:
            torch.cuda.synchronize()
        n += chunk
        now = time.time()
        if now >= until:
            return n, now


def throughput(args: argparse.Namespace) -> int:
    torch = None if args.fake else __import__("torch")
    sync = Path(args.sync)
    out: dict = {"role": "throughput", "name": args.name, **facts(torch), "phases": {}}
    for phase in args.phases.split(","):
        if torch is None:
            step, chunk = (lambda: time.sleep(0.001)), 10
        elif phase == "small":
            step, chunk = make_small(torch)
        elif phase == "matmul":
            step, chunk = make_matmul(torch, args.matmul_size)
        else:
            raise SystemExit(f"unknown phase {phase!r}: use small and/or matmul")
        run_for(torch, step, chunk, time.time() + args.warmup)
        (sync / f"ready-{phase}-{args.name}").write_text(str(time.time()))
        t_go = float(wait_for(sync / f"go-{phase}", args.barrier_timeout))
        while time.time() < t_go:
            time.sleep(0.001)
        n, t_end = run_for(torch, step, chunk, t_go + args.duration)
        out["phases"][phase] = {
            "iterations": n,
            "t_go": t_go,
            "t_end": t_end,
            "seconds": t_end - t_go,
            "rate": n / (t_end - t_go),
            "max_memory_mib": torch.cuda.max_memory_reserved() / MIB if torch else 0,
        }
        write_json(Path(args.out), out)
        del step
        if torch is not None:
            torch.cuda.empty_cache()
    return 0


# -- checked ---------------------------------------------------------------------------------
def checked(args: argparse.Namespace) -> int:
    if args.fake:
        return fake_checked(args)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    sync = Path(args.sync)
    n = args.n
    gen = torch.Generator().manual_seed(1234)
    a_cpu = torch.randint(-3, 4, (n, n), generator=gen, dtype=torch.int64)
    b_cpu = torch.randint(-3, 4, (n, n), generator=gen, dtype=torch.int64)
    c_cpu = (a_cpu.double() @ b_cpu.double()).long()  # exact: |values| < 2**24
    colsum_b = b_cpu.sum(dim=0)  # (A + k) @ B = A @ B + k * (1 @ B)
    hold = torch.ones(args.hold_mib * MIB, dtype=torch.uint8, device="cuda")
    a = a_cpu.to("cuda", torch.float32)
    b = b_cpu.to("cuda", torch.float32)
    c_ref = c_cpu.to("cuda", torch.float32)  # |values| < 2**24: exact in fp32
    row = colsum_b.to("cuda", torch.float32).unsqueeze(0)
    out: dict = {"role": "checked", "name": args.name, **facts(torch), "n": n}
    (sync / f"ready-checked-{args.name}").write_text(str(time.time()))
    iters = mismatches = 0
    checksum = expected = 0
    c_sum = int(c_cpu.sum())
    b_total = int(colsum_b.sum())
    t0 = time.time()
    stop = sync / "stop"
    while not stop.exists() and time.time() - t0 < args.max_s:
        k = iters % 7
        c = (a + k) @ b
        if not torch.equal(c, c_ref + k * row):
            mismatches += 1
        checksum += int(c.sum(dtype=torch.float64).item())
        expected += c_sum + k * n * b_total
        iters += 1
    ok_hold = bool(hold[:: 1 << 20].sum().item() == hold[:: 1 << 20].numel())
    out.update(
        iterations=iters,
        mismatches=mismatches,
        checksum=checksum,
        expected_checksum=expected,
        hold_mib=args.hold_mib,
        hold_intact=ok_hold,
        seconds=time.time() - t0,
        ok=mismatches == 0 and checksum == expected and ok_hold and iters > 0,
    )
    write_json(Path(args.out), out)
    return 0 if out["ok"] else 1


# -- hog -------------------------------------------------------------------------------------
def hog(args: argparse.Namespace) -> int:
    if args.fake:
        return fake_hog(args)
    import torch

    out: dict = {"role": "hog", "name": args.name, **facts(torch), "target_mib": args.target_mib}
    chunks = []
    allocated = 0
    out_path = Path(args.out)
    try:
        while allocated < args.target_mib:
            t = torch.empty(args.step_mib * MIB, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            chunks.append(t)
            allocated += args.step_mib
            out.update(allocated_mib=allocated, state="allocating", t=time.time())
            write_json(out_path, out)
    except torch.OutOfMemoryError as e:
        out.update(
            allocated_mib=allocated,
            state="out_of_memory",
            error=str(e).splitlines()[0][:300],
            t=time.time(),
        )
        write_json(out_path, out)
        return 3
    out.update(state="holding", reached_at=time.time())
    write_json(out_path, out)
    t0 = time.time()
    while time.time() - t0 < args.hold_s:  # keep using the memory until stopped
        chunks[-1].add_(1)
        torch.cuda.synchronize()
        time.sleep(0.05)
    out.update(state="held_to_the_end", t=time.time())
    write_json(out_path, out)
    return 0


# -- --fake: no GPU, same files and exit codes (a dry run of the coordinator) ---------------
def fake_checked(args: argparse.Namespace) -> int:
    sync = Path(args.sync)
    (sync / f"ready-checked-{args.name}").write_text(str(time.time()))
    iters, t0 = 0, time.time()
    while not (sync / "stop").exists() and time.time() - t0 < args.max_s:
        time.sleep(0.01)
        iters += 1
    out = {"role": "checked", "name": args.name, **facts(None), "iterations": iters}
    out.update(mismatches=0, checksum=iters, expected_checksum=iters, ok=iters > 0)
    write_json(Path(args.out), out)
    return 0


def fake_hog(args: argparse.Namespace) -> int:
    """Allocates nothing; under an MPS memory limit ("0=<N>M") it 'runs out' at N MiB."""
    env_limit = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
    limit = int(env_limit.split("=")[1].rstrip("M")) if "=" in env_limit else None
    out: dict = {"role": "hog", "name": args.name, **facts(None), "target_mib": args.target_mib}
    allocated = 0
    while allocated < args.target_mib:
        if limit is not None and allocated + args.step_mib > limit:
            out.update(allocated_mib=allocated, state="out_of_memory", error="fake OOM")
            write_json(Path(args.out), out)
            return 3
        allocated += args.step_mib
        out.update(allocated_mib=allocated, state="allocating", t=time.time())
        write_json(Path(args.out), out)
        time.sleep(0.005)
    out.update(state="holding", reached_at=time.time())
    write_json(Path(args.out), out)
    time.sleep(args.hold_s)
    out.update(state="held_to_the_end")
    write_json(Path(args.out), out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=["throughput", "checked", "hog"])
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True, help="result JSON file")
    p.add_argument("--sync", default=".", help="barrier directory shared with the coordinator")
    p.add_argument("--phases", default="small,matmul")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--barrier-timeout", type=float, default=240.0)
    p.add_argument("--matmul-size", type=int, default=8192)
    p.add_argument("--n", type=int, default=1024, help="checked: matrix size")
    p.add_argument("--hold-mib", type=int, default=1024, help="checked: memory held")
    p.add_argument("--max-s", type=float, default=120.0, help="checked: give up after")
    p.add_argument("--target-mib", type=int, default=0, help="hog: how much to allocate")
    p.add_argument("--step-mib", type=int, default=256, help="hog: chunk size")
    p.add_argument("--hold-s", type=float, default=60.0, help="hog: hold the memory this long")
    p.add_argument("--fake", action="store_true", help="no GPU: simulate (dry runs)")
    args = p.parse_args(argv)
    if args.fake:
        return {"throughput": throughput, "checked": checked, "hog": hog}[args.role](args)
    try:
        import torch
    except ImportError:
        print(
            "sharing_worker: PyTorch is not installed here; run on a GPU machine", file=sys.stderr
        )
        return 2
    if not torch.cuda.is_available():
        print("sharing_worker: no CUDA GPU is visible to this process", file=sys.stderr)
        return 2
    role = {"throughput": throughput, "checked": checked, "hog": hog}[args.role]
    try:
        return role(args)
    except Exception as e:  # report, then fail: the coordinator reads the file
        write_json(Path(args.out), {"role": args.role, "name": args.name, "error": repr(e)})
        raise


if __name__ == "__main__":
    sys.exit(main())
