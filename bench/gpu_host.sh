# Sourced (from the repository root) by the real-GPU checks that drive `gpupool up` on the
# device tool's machines as root: bench/multi_gpu_check.sh, bench/energy_gpu_check.sh.

# gpu_host_setup OUT_DEFAULT: $OUT made (OUT_DEFAULT when unset); NVLink multicast off for
# everything started from here; the wheels in .whl/ (gpupool's dependencies the machine lacks)
# installed to /tmp/site; gpupool's src/ on PYTHONPATH; all of it readable by the jobs account.
gpu_host_setup() {
  OUT="${OUT:-$1}"
  mkdir -p "$OUT"
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  chmod -R a+rX "$PWD" /tmp/site 2>/dev/null || true
}

# gpu_host_finish RC: after a run its timeout killed (RC 124 or 137), quit every MPS control
# daemon gpupool left (gpupool stops its own; never leave one behind); then exit RC.
gpu_host_finish() {
  if [ "$1" = 124 ] || [ "$1" = 137 ]; then
    for p in /run/gpupool/*/mps/*/pipe; do
      [ -d "$p" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY="$p" timeout 10 nvidia-cuda-mps-control
    done
  fi
  exit "$1"
}
