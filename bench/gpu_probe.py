"""A dependency-free CUDA probe (driver API through ctypes) for the local-executor GPU check.

Prints one JSON line: the devices this process sees (count and UUIDs) and, with
`--alloc-mib N`, how many MiB it could allocate on device 0 in `--chunk-mib` pieces before
an allocation failed (capped at N). Under MPS with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT the cap
shows up as a failed allocation near the limit.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alloc-mib", type=int, default=0)
    ap.add_argument("--chunk-mib", type=int, default=256)
    ap.add_argument("--hold-s", type=float, default=0, help="keep the context this long")
    args = ap.parse_args()
    out: dict[str, object] = {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
        "mps_mem_limit": os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
        "mps_threads": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        out["error"] = f"no CUDA driver: {e}"
        print(json.dumps(out))
        return 1
    rc = cuda.cuInit(0)
    if rc != 0:
        out["error"] = f"cuInit failed with {rc}"
        print(json.dumps(out))
        return 1
    n = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(n))
    uuids = []
    for i in range(n.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = (ctypes.c_char * 16)()
        fn = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
        fn(raw, dev)
        uuids.append(_uuid(bytes(raw)))
    out["device_count"] = n.value
    out["uuids"] = uuids
    if args.alloc_mib and n.value:
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        ctx = ctypes.c_void_p()
        rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        rc = rc or cuda.cuCtxSetCurrent(ctx)
        if rc != 0:
            out["error"] = f"context creation failed with {rc}"
            print(json.dumps(out))
            return 1
        got, ptrs, fail = 0, [], None
        while got + args.chunk_mib <= args.alloc_mib:
            p = ctypes.c_uint64()
            rc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(args.chunk_mib << 20))
            if rc != 0:
                fail = rc  # 2 = CUDA_ERROR_OUT_OF_MEMORY
                break
            ptrs.append(p)
            got += args.chunk_mib
        out["allocated_mib"] = got
        out["alloc_error"] = fail
    print(json.dumps(out), flush=True)
    if args.hold_s:
        import time

        time.sleep(args.hold_s)  # stay on the GPU (telemetry checks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
