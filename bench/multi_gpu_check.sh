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
. bench/gpu_host.sh
gpu_host_setup bench/results/multi_gpu_check_run
{ date -u; nvidia-smi -L; nvidia-smi topo -m; python3 --version; command -v python3;
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())';
  command -v nvidia-cuda-mps-control; nproc; } > "$OUT/environment.txt" 2>&1
timeout -k 20 420 python3 bench/multi_gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "== rc=$rc" | tee -a "$OUT/run.log"
gpu_host_finish "$rc"
