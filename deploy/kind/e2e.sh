#!/usr/bin/env bash
# NOT RUN HERE: the machines gpupool is developed and tested on have no container engine, so
# no kind or k3s cluster can run there. Checked only with `bash -n` and shellcheck.
#
# The whole stack on a throwaway kind cluster with fake GPUs, end to end:
#   1. kind create cluster; each worker advertises nvidia.com/gpu (FAKE_GPUS per node) by a
#      patch of its status capacity (the documented way to advertise an extended resource;
#      nothing isolates or even exists behind it) and GPU Feature Discovery's labels;
#   2. builds the gpupool and hub images (deploy/docker/Dockerfile) and loads them into kind;
#   3. helm install deploy/helm/gpupool, then Zero-to-JupyterHub with
#      deploy/helm/z2jh-values.yaml (the hub token Secret made from an admin token);
#   4. a 1-GPU job through the gpupool CLI (scripts/k8s-real-cluster.sh does that part) and a
#      GPU notebook through the hub's REST API: gpupool queues it, creates its pod in the
#      tenant's namespace, and the hub's proxy reaches it;
#   5. checks: the job's pod Succeeded; the notebook is a running `notebook` workload with an
#      endpoint, its pod runs pinned to a node with nvidia.com/gpu: 1, and /user/ann/api
#      answers through the hub; its namespace has the NetworkPolicy
#      gpupool-block-cloud-metadata (kind 0.24 and later enforce NetworkPolicy, so the
#      notebook reaching the hub and DNS shows the policy lets them through; kind has no
#      metadata server, so the blocking itself is left to scripts/k8s-real-cluster.sh).
#
# Usage: deploy/kind/e2e.sh        (KEEP=1 leaves the cluster; CLUSTER=name, FAKE_GPUS=4)
# Needs: docker, kind, kubectl, helm, curl, python3 with gpupool importable (PYTHONPATH=src).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${CLUSTER:-gpupool-e2e}
FAKE_GPUS=${FAKE_GPUS:-4}
TAG=e2e
GPUPOOL=${GPUPOOL:-"python3 -m gpupool.cli.main"}
PORT=${PORT:-18080}
HUB_PORT=${HUB_PORT:-18000}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

say() { printf '\n== %s\n' "$*"; }
need() { command -v "$1" >/dev/null || { echo "missing: $1" >&2; exit 2; }; }
for t in docker kind kubectl helm curl python3; do need "$t"; done

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

say "kind cluster $CLUSTER (1 control plane, 2 workers)"
cat <<EOF | kind create cluster --name "$CLUSTER" --config -
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
kubectl wait --for=condition=Ready nodes --all --timeout=5m

say "fake GPUs: $FAKE_GPUS x nvidia.com/gpu per worker"
kubectl proxy --port=18001 >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 30); do curl -fsS http://127.0.0.1:18001/api >/dev/null 2>&1 && break; sleep 1; done
for n in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
  n=${n#node/}
  curl -fsS -X PATCH -H 'Content-Type: application/json-patch+json' \
    "http://127.0.0.1:18001/api/v1/nodes/$n/status" \
    --data "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$FAKE_GPUS\"}]" \
    >/dev/null
  kubectl label node "$n" --overwrite nvidia.com/gpu.present=true \
    nvidia.com/gpu.product=FAKE-GPU nvidia.com/gpu.memory=16384 "nvidia.com/gpu.count=$FAKE_GPUS"
done
kubectl get nodes -o custom-columns='NAME:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu'

say "images"
docker build -f "$ROOT/deploy/docker/Dockerfile" --target gpupool -t "gpupool:$TAG" "$ROOT"
docker build -f "$ROOT/deploy/docker/Dockerfile" --target hub -t "gpupool-hub:$TAG" "$ROOT"
kind load docker-image --name "$CLUSTER" "gpupool:$TAG" "gpupool-hub:$TAG"

say "gpupool chart, and a 1-GPU job through the CLI"
KEEP=1 IMAGE="gpupool:$TAG" GPUPOOL="$GPUPOOL" PORT="$PORT" "$ROOT/scripts/k8s-real-cluster.sh"

say "log in as admin again; a user for the notebook"
PASSWORD=$(kubectl -n gpupool get secret gpupool-admin -o jsonpath='{.data.password}' | base64 -d)
kubectl -n gpupool port-forward svc/gpupool "$PORT":8080 >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 60); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 1; done
export XDG_CONFIG_HOME; XDG_CONFIG_HOME=$(mktemp -d)
printf '%s\n' "$PASSWORD" | $GPUPOOL login --url "http://127.0.0.1:$PORT" --user admin --password-stdin
printf 'ann-password-e2e\n' | $GPUPOOL user create ann --tenant default --password-stdin
ADMIN_TOKEN=$(python3 - "$XDG_CONFIG_HOME" <<'PY'
import pathlib, sys, tomllib
cfg = tomllib.loads((pathlib.Path(sys.argv[1]) / "gpupool" / "config.toml").read_text())
print(cfg["token"])
PY
)
HUB_TOKEN=$(curl -fsS -X POST "http://127.0.0.1:$PORT/api/v1/tokens" \
  -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
  --data '{"name": "jupyterhub"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')

say "Zero-to-JupyterHub with deploy/helm/z2jh-values.yaml"
kubectl create namespace jhub --dry-run=client -o yaml | kubectl apply -f -
kubectl -n jhub create secret generic gpupool-hub-token --from-literal=token="$HUB_TOKEN" \
  --dry-run=client -o yaml | kubectl apply -f -
SERVICE_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
helm repo add jupyterhub https://hub.jupyter.org/helm-chart/ >/dev/null 2>&1 || true
helm repo update jupyterhub >/dev/null
helm upgrade --install jhub jupyterhub/jupyterhub -n jhub \
  --values "$ROOT/deploy/helm/z2jh-values.yaml" \
  --set hub.image.name=gpupool-hub --set hub.image.tag="$TAG" \
  --set singleuser.image.name=quay.io/jupyter/base-notebook --set singleuser.image.tag=latest \
  --set "hub.services.e2e.apiToken=$SERVICE_TOKEN" --set hub.services.e2e.admin=true \
  --set prePuller.hook.enabled=false --set prePuller.continuous.enabled=false \
  --wait --timeout 10m
kubectl -n jhub port-forward svc/proxy-public "$HUB_PORT":80 >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 60); do curl -fsS "http://127.0.0.1:$HUB_PORT/hub/api" >/dev/null 2>&1 && break; sleep 1; done

say "a GPU notebook for ann through the hub (profile gpu)"
HUB="http://127.0.0.1:$HUB_PORT/hub/api"
AUTH=(-H "Authorization: token $SERVICE_TOKEN")
curl -fsS -X POST "${AUTH[@]}" "$HUB/users/ann" >/dev/null || true
curl -fsS -X POST "${AUTH[@]}" "$HUB/users/ann/server" --data '{"profile": "gpu"}' || true
READY=""
for _ in $(seq 180); do
  READY=$(curl -fsS "${AUTH[@]}" "$HUB/users/ann" \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["servers"].get("",{}); print(s.get("ready", False))')
  [ "$READY" = True ] && break
  sleep 2
done
$GPUPOOL ls --all
NB=$($GPUPOOL ls --all --json | python3 -c '
import json, sys
nbs = [w for w in json.load(sys.stdin) if w["kind"] == "notebook" and w["state"] == "running"]
print(nbs[0]["id"] if nbs else "")')
[ "$READY" = True ] && [ -n "$NB" ] || { echo "FAILED: notebook ready=$READY workload=$NB" >&2; exit 1; }
$GPUPOOL show "$NB"

say "the notebook's pod, made by gpupool"
kubectl get pods -A -l "gpupool.dev/workload=$NB" -o wide
LIMIT=$(kubectl get pods -A -l "gpupool.dev/workload=$NB" \
  -o jsonpath='{.items[0].spec.containers[0].resources.limits.nvidia\.com/gpu}')
[ "$LIMIT" = 1 ] || { echo "FAILED: the notebook's pod asks for nvidia.com/gpu=$LIMIT" >&2; exit 1; }
USER_TOKEN=$(curl -fsS -X POST "${AUTH[@]}" "$HUB/users/ann/tokens" --data '{"note": "e2e"}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -fsS -H "Authorization: token $USER_TOKEN" "http://127.0.0.1:$HUB_PORT/user/ann/api" ; echo
NB_NS=$(kubectl get pods -A -l "gpupool.dev/workload=$NB" -o jsonpath='{.items[0].metadata.namespace}')
kubectl -n "$NB_NS" get networkpolicy gpupool-block-cloud-metadata \
  || { echo "FAILED: no gpupool-block-cloud-metadata NetworkPolicy in $NB_NS" >&2; exit 1; }

say "stop it through the hub: gpupool deletes the pod"
curl -fsS -X DELETE "${AUTH[@]}" "$HUB/users/ann/server" || true
for _ in $(seq 60); do
  [ -z "$(kubectl get pods -A -l "gpupool.dev/workload=$NB" -o name)" ] && break
  sleep 2
done
[ -z "$(kubectl get pods -A -l "gpupool.dev/workload=$NB" -o name)" ] \
  || { echo "FAILED: the notebook's pod is still there" >&2; exit 1; }
echo "OK: job and notebook ran on kind with fake GPUs, through gpupool"
