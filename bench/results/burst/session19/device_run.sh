#!/bin/bash
# Session 19: run a list of replays on the device host (16 CPUs), one process a replay, from
# the shipped working tree (carry build/s19 for philly.csv.gz and .whl for the wheels).
#   bash bench/results/burst/session19/device_run.sh TASKFILE SECONDS
# Each TASKFILE line:
#   burst VARIANT SEED GAP [TAG]                      (session18/burst_one.py, one replay)
#   philly SCOPE LOAD POLICY GAP [TAG [SETS]]         (bench/trace_compare.py, one replay)
set -u
tasks=$1; secs=$2
export R=${R:-/tmp/s19}; mkdir -p $R/res $R/log
export ROOT=$PWD
gunzip -c build/s19/philly.csv.gz > $R/philly.csv
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
cat > $R/one.sh <<'EOS'
kind=$1; shift 1
cd $ROOT || exit 1
export PYTHONPATH=$ROOT/src:/tmp/site PYTHONUNBUFFERED=1
if [ "$kind" = burst ]; then
  log=$R/log/burst-${1%%:*}-$2-$3-${4:-}.log
  python3 bench/results/burst/session18/burst_one.py "$1" "$2" "$3" $R/res "${4:-}" >"$log" 2>&1
else
  scope=$1; load=$2; pol=$3; gap=$4; tag=${5:-}; sets=${6:-}
  extra=(); [ -n "$tag" ] && extra+=(--tag "$tag")
  for s in ${sets//;/ }; do extra+=(--set "$s"); done
  mkdir -p $R/res/philly-gap$gap
  log=$R/log/philly-$scope-$load-$pol-$gap-$tag.log
  python3 bench/trace_compare.py --trace $R/philly.csv --scopes "$scope" --loads "$load" \
    --policies "$pol" --checkpointing --gap "$gap" --jobs 1 "${extra[@]}" \
    --out $R/res/philly-gap$gap >"$log" 2>&1
fi
rc=$?
echo "$(date +%T) done rc=$rc $kind $*"
EOS
nproc; python3 --version; date +%T
grep -v "^#" "$tasks" | timeout "$secs" xargs -P "${P:-16}" -L 1 bash $R/one.sh
echo "xargs rc=$? at $(date +%T)"
sleep 2
tar -czf "$OUT/res.tar.gz" -C $R res log
