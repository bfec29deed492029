#!/bin/bash
# Session 18: run a list of replays on the device host (16 CPUs), one process a replay.
# Usage (on the device, in the repository root, with build/q18 and .whl carried):
#   bash build/q18/device_run.sh TASKFILE SECONDS
# build/q18 holds tree.tar (src, bench/*.py and this folder of this branch), km.tar (the same
# with session16/km_levels.diff applied), philly.csv.gz and whl/ (pyyaml). Each TASKFILE line:
#   TREE burst VARIANT SEED GAP [TAG]          (TREE: base or km; burst_one.py)
#   TREE philly SCOPE LOAD POLICY GAP [TAG [SETS]]   (trace_compare.py, one replay)
set -u
tasks=$1; secs=$2
export R=${R:-/tmp/q18}; mkdir -p $R/res $R/log
tar -xf build/q18/tree.tar -C $R && tar -xf build/q18/km.tar -C $R
gunzip -c build/q18/philly.csv.gz > $R/philly.csv
[ -n "${SKIP_PIP:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/pydantic-*.whl .whl/pydantic_core-*.whl .whl/annotated_types-*.whl \
    .whl/typing_extensions-*.whl .whl/typing_inspection-*.whl build/q18/whl/*.whl || exit 1
cat > $R/one.sh <<'EOS'
tree=$1; kind=$2; shift 2
cd $R/$tree || exit 1
export PYTHONPATH=$R/$tree/src:/tmp/site PYTHONUNBUFFERED=1
if [ "$kind" = burst ]; then
  log=$R/log/$tree-burst-$1-$2-$3-${4:-}.log
  python3 bench/results/burst/session18/burst_one.py "$1" "$2" "$3" $R/res "${4:-}" >"$log" 2>&1
else
  scope=$1; load=$2; pol=$3; gap=$4; tag=${5:-}; sets=${6:-}
  extra=(); [ -n "$tag" ] && extra+=(--tag "$tag")
  for s in ${sets//;/ }; do extra+=(--set "$s"); done
  mkdir -p $R/res/philly-gap$gap
  log=$R/log/$tree-philly-$scope-$load-$pol-$gap-$tag.log
  python3 bench/trace_compare.py --trace $R/philly.csv --scopes "$scope" --loads "$load" \
    --policies "$pol" --checkpointing --gap "$gap" --jobs 1 "${extra[@]}" \
    --out $R/res/philly-gap$gap >"$log" 2>&1
fi
rc=$?
echo "$(date +%T) done rc=$rc $tree $kind $*"
EOS
nproc; python3 --version; date +%T
grep -v "^#" "$tasks" | timeout "$secs" xargs -P "${P:-16}" -L 1 bash $R/one.sh
echo "xargs rc=$? at $(date +%T)"
sleep 2
tar -czf "$OUT/res.tar.gz" -C $R res log
