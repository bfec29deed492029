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
OUT="${OUT:-bench/results/energy_gpu_check_run}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
chmod -R a+rX "$PWD" /tmp/site 2>/dev/null || true
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv;
  python3 --version; command -v python3; nproc;
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())'; } \
  > "$OUT/environment.txt" 2>&1
timeout -k 20 400 python3 bench/energy_gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "== rc=$rc" | tee -a "$OUT/run.log"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then  # never leave an MPS daemon behind
  for p in /run/gpupool/*/mps/*/pipe; do
    [ -d "$p" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY="$p" timeout 10 nvidia-cuda-mps-control
  done
fi
exit "$rc"
