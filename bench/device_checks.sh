#!/usr/bin/env bash
# The real-GPU checks of issues 13, 17 and 18 (MIG, read only) in one run (the device tool's machine, as root):
# DCGM clock/energy fields, gpupool's own MPS server not reported as unowned, the node agent
# on real GPUs, and the `gpu`-marked tests. Wheels for gpupool's dependencies that the machine
# lacks travel in .whl/ (see /work/.library/device/README.md). Results go to $OUT.
#
#   bench/device_checks.sh            # OUT defaults to bench/results/device_checks_run
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/device_checks_run}"
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
chmod -R a+rX "$PWD" /tmp/site 2>/dev/null || true
{ date -u; nvidia-smi -L; python3 --version; } \
  > "$OUT/environment.txt" 2>&1
rc=0
run() { echo "== $*" | tee -a "$OUT/checks.log"; "$@" 2>&1 | tee -a "$OUT/checks.log"; local r=${PIPESTATUS[0]}; echo "== rc=$r" | tee -a "$OUT/checks.log"; [ "$r" = 0 ] || rc=1; }
run timeout 120 python3 bench/telemetry_dcgm_fields.py --out "$OUT"
run timeout 180 python3 bench/mps_false_alarm_gpu.py "$OUT"
run timeout 150 python3 bench/agent_gpu_check.py "$OUT"
run timeout 180 python3 bench/mig_device_check.py "$OUT"
run timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/telemetry/test_telemetry_gpu.py tests/engines/local/test_gpu_real.py
exit $rc
