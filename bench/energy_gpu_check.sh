#!/usr/bin/env bash
# The real-GPU check of chargeback energy (issue 35 part 3) on a host with an NVIDIA GPU (the
# device tool's nvidia-h200, as root): `gpupool up` on the real GPU, a whole-GPU and two
# half-GPU burning jobs, the chargeback's energy_kwh against the NVML energy counter's own
# delta and the power integral. Wheels for gpupool's dependencies that the machine lacks
# travel in .whl/. Results go to $OUT.
#
#   bench/energy_gpu_check.sh              # OUT defaults to bench/results/energy_gpu_check_run
#   bench/energy_gpu_check.sh --dry-run    # here, without GPUs: a simulated GPU
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_host.sh
gpu_host_setup bench/results/energy_gpu_check_run
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv;
  python3 --version; command -v python3; nproc;
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())'; } \
  > "$OUT/environment.txt" 2>&1
timeout -k 20 400 python3 bench/energy_gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "== rc=$rc" | tee -a "$OUT/run.log"
gpu_host_finish "$rc"
