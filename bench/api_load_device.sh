#!/usr/bin/env bash
# The API load benchmark (bench/api_load.py) on an idle many-core host, as recorded in
# bench/results/api_load.md: the server (all its processes: N API workers and the primary)
# pinned to the first N+1 cores (2 when N = 0), the load generator to cores 8-11, for several
# `--workers` counts N. Reports go to $OUT (or
# bench/results/api_load_run). Needs gpupool's dependencies and aiohttp importable
# (PYTHONPATH is pointed at src/ when gpupool is not installed).
#
#   bench/api_load_device.sh [WORKERS ...]      # default: 0 1 2 4 6
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/api_load_run}"
mkdir -p "$OUT"
python3 -c "import gpupool" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
DURATION="${DURATION:-20}"
{ date -u; nproc; python3 --version; git log -1 --format='%h %s' 2>/dev/null | cut -c1-80; } > "$OUT/environment.txt"
for n in "${@:-0 1 2 4 6}"; do
  for w in $n; do
    last=$((w > 0 ? w : 1))
    echo "== workers $w, server cores 0-$last, load generator cores 8-11" | tee -a "$OUT/runs.log"
    taskset -c 8-11 python3 bench/api_load.py --clients 200 --rate 20 --duration "$DURATION" \
      --workers "$w" --server-cpus "0-$last" --scheduler-interval 0.5 \
      --out "$OUT/w$w.md" 2>&1 | tee -a "$OUT/runs.log"
  done
done
