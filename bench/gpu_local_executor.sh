#!/usr/bin/env bash
# Real-GPU check of the local executor: every job sees exactly its GPU, and a fractional
# share's memory limit holds under a gpupool-managed CUDA MPS daemon (allocating past it
# fails), while a policed share is not limited by the driver. Results go to $OUT (or
# bench/results/gpu_local_executor when $OUT is unset); exit code 0 when all checks pass.
#
#   bench/gpu_local_executor.sh            # from the repository root, on a GPU machine
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/gpu_local_executor}"
mkdir -p "$OUT"
python3 -c "import gpupool" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  nvidia-smi -L || true
  nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_mode --format=csv || true
  command -v nvidia-cuda-mps-control || echo "nvidia-cuda-mps-control NOT FOUND"
} > "$OUT/environment.txt" 2>&1
python3 bench/gpu_local_executor.py "$OUT" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "exit $rc" >> "$OUT/run.log"
exit "$rc"
