#!/usr/bin/env bash
# The real-GPU checks of issue 21 on a host with one or more GPUs (e.g. the device tool's
# nvidia-h100-x2 or -x4, as root): 2-GPU binding, two tenants on their own GPUs, MPS daemons
# with memory limits, per-GPU telemetry attribution (top, dashboard, /metrics) and a 2-GPU DDP
# job under gpupool. Checks that need more GPUs than the host has say SKIP (not a failure).
# Wheels for gpupool's dependencies that the machine lacks travel in .whl/. Results go to
# $OUT (at most 6 files). NVLink multicast stays off for everything started from here.
#
#   bench/multi_gpu_check.sh               # OUT defaults to bench/results/multi_gpu_check_run
#   bench/multi_gpu_check.sh --dry-run     # here, without GPUs: simulated GPUs, stand-in MPS
#   bench/multi_gpu_check.sh --dry-run --simulate-gpus 4   # as on a 4-GPU host
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/multi_gpu_check_run}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
chmod -R a+rX "$PWD" /tmp/site 2>/dev/null || true
{ date -u; nvidia-smi -L; nvidia-smi topo -m; python3 --version; command -v python3;
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())';
  command -v nvidia-cuda-mps-control; nproc; } > "$OUT/environment.txt" 2>&1
timeout -k 20 420 python3 bench/multi_gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "== rc=$rc" | tee -a "$OUT/run.log"
# never leave an MPS daemon behind (gpupool stops its own; this catches a killed run)
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  for p in /run/gpupool/*/mps/*/pipe; do
    [ -d "$p" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY="$p" timeout 10 nvidia-cuda-mps-control
  done
fi
exit "$rc"
