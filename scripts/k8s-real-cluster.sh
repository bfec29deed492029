#!/usr/bin/env bash
# NOT RUN HERE: the machines gpupool is developed and tested on cannot run a Kubernetes cluster
# (no container engine, no kube-apiserver). This script is for anyone with a real cluster.
#
# End-to-end check of the Helm chart on a real cluster (kind or k3s) whose nodes advertise
# nvidia.com/gpu, e.g. through a fake-GPU device plugin (such as run-ai's fake-gpu-operator)
# or real GPUs with the NVIDIA GPU Operator:
#   1. helm install deploy/helm/gpupool (bundled PostgreSQL, agent off unless AGENT=1);
#   2. wait for the server, log in as admin with the generated password (port-forward);
#   3. submit a 1-GPU job through the gpupool CLI and wait for it to finish;
#   4. check a pod labelled with the workload id ran in the tenant's namespace;
#   5. check the tenant's namespace has the NetworkPolicy gpupool-block-cloud-metadata and, on
#      a cloud VM whose metadata server (169.254.169.254) answers a pod of the release's
#      namespace, that it does not answer a pod of the tenant's (fails when the CNI does not
#      enforce NetworkPolicy; says so and skips that part where no metadata server answers).
#
# Usage: IMAGE=registry/gpupool:tag scripts/k8s-real-cluster.sh
#   IMAGE       the gpupool image your cluster can pull (build it: deploy/docker/Dockerfile)
#   NAMESPACE   where to install (default gpupool); RELEASE (default gpupool)
#   AGENT=1     also run the agent DaemonSet (needs node tokens; see docs/kubernetes.md)
#   KEEP=1      leave the release installed afterwards
# Needs: kubectl (current context = the test cluster), helm, and gpupool on PATH (or
# PYTHONPATH=src python -m gpupool.cli.main).
set -euo pipefail

: "${IMAGE:?set IMAGE=registry/gpupool:tag (build it with deploy/docker/Dockerfile)}"
NAMESPACE=${NAMESPACE:-gpupool}
RELEASE=${RELEASE:-gpupool}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPUPOOL=${GPUPOOL:-gpupool}
PORT=${PORT:-18080}

say() { printf '\n== %s\n' "$*"; }
cleanup() {
  [ -n "${PF_PID:-}" ] && kill "$PF_PID" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then helm uninstall "$RELEASE" -n "$NAMESPACE" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

say "nodes with nvidia.com/gpu"
kubectl get nodes -o custom-columns='NAME:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu'
kubectl get nodes -o jsonpath='{.items[*].status.allocatable.nvidia\.com/gpu}' | grep -q '[1-9]' \
  || { echo "no node advertises nvidia.com/gpu: install a (fake-)GPU device plugin first" >&2; exit 1; }

say "helm install $RELEASE ($IMAGE)"
helm upgrade --install "$RELEASE" "$ROOT/deploy/helm/gpupool" -n "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set agent.enabled="$([ "${AGENT:-0}" = 1 ] && echo true || echo false)" \
  --set postgresql.persistence.enabled=false --wait --timeout 10m

say "server ready"
kubectl -n "$NAMESPACE" rollout status deploy/"$RELEASE" --timeout=5m
PASSWORD=$(kubectl -n "$NAMESPACE" get secret "$RELEASE-admin" -o jsonpath='{.data.password}' | base64 -d)
kubectl -n "$NAMESPACE" port-forward svc/"$RELEASE" "$PORT":8080 >/dev/null 2>&1 &
PF_PID=$!
for _ in $(seq 60); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 1; done
curl -fsS "http://127.0.0.1:$PORT/readyz"; echo

export XDG_CONFIG_HOME; XDG_CONFIG_HOME=$(mktemp -d)
printf '%s\n' "$PASSWORD" | $GPUPOOL login --url "http://127.0.0.1:$PORT" --user admin --password-stdin
$GPUPOOL node ls

say "submit a 1-GPU job"
WID=$($GPUPOOL run --gpus 1 --name k8s-e2e -- sh -c 'nvidia-smi -L || echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"')
echo "workload $WID"
for _ in $(seq 300); do
  STATE=$($GPUPOOL show "$WID" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case "$STATE" in succeeded|failed|cancelled|preempted) break ;; esac
  sleep 2
done
$GPUPOOL show "$WID"
$GPUPOOL logs "$WID" || true

say "the pod gpupool made for it"
kubectl get pods -A -l "gpupool.dev/workload=$WID" -o wide
PHASE=$(kubectl get pods -A -l "gpupool.dev/workload=$WID" -o jsonpath='{.items[0].status.phase}')
[ "$STATE" = succeeded ] && [ "$PHASE" = Succeeded ] \
  || { echo "FAILED: workload $STATE, pod $PHASE" >&2; exit 1; }
echo "OK: workload $WID succeeded in pod phase $PHASE"

say "the cloud metadata server from a tenant's namespace"
TENANT_NS=$(kubectl get pods -A -l "gpupool.dev/workload=$WID" -o jsonpath='{.items[0].metadata.namespace}')
kubectl -n "$TENANT_NS" get networkpolicy gpupool-block-cloud-metadata
# exit 0 when the metadata server answers (any HTTP status) a pod in namespace $1
metadata_answers() {
  kubectl -n "$1" run "metadata-probe-$RANDOM" --image="$IMAGE" --restart=Never --rm -i \
    --quiet --command -- python3 -c '
import urllib.error, urllib.request
try:
    urllib.request.urlopen("http://169.254.169.254/", timeout=5)
except urllib.error.HTTPError:
    pass' >/dev/null 2>&1
}
if ! metadata_answers "$NAMESPACE"; then
  echo "no metadata server answers in $NAMESPACE either (not a cloud VM?): blocking not checked"
elif metadata_answers "$TENANT_NS"; then
  echo "FAILED: the metadata server answers a pod in $TENANT_NS despite the NetworkPolicy" \
    "gpupool-block-cloud-metadata: does your CNI enforce NetworkPolicy?" >&2
  exit 1
else
  echo "OK: the metadata server answers in $NAMESPACE, not in $TENANT_NS"
fi
