#!/usr/bin/env bash
# Create a local kind cluster with Chaos Mesh and the shop demo app, so agent-sre can run against a real cluster.
# Needs docker, kind, kubectl and helm, and network access to pull images. Idempotent: reruns reuse the cluster.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-agent-sre}"
CHAOS_MESH_VERSION="${CHAOS_MESH_VERSION:-2.8.2}"
KUBECONFIG_OUT="${KUBECONFIG_OUT:-$repo/.agent-sre/kind-kubeconfig}"

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "error: $tool is required but not on PATH" >&2; exit 1; }
done

mkdir -p "$(dirname "$KUBECONFIG_OUT")"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  echo "kind cluster $CLUSTER_NAME already exists; reusing it"
  kind export kubeconfig --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_OUT"
else
  kind create cluster --name "$CLUSTER_NAME" --config "$here/kind-config.yaml" --kubeconfig "$KUBECONFIG_OUT" --wait 180s
fi
export KUBECONFIG="$KUBECONFIG_OUT"

# Chaos Mesh, with the containerd settings its docs give for kind nodes.
helm repo add chaos-mesh https://charts.chaos-mesh.org >/dev/null 2>&1 || true
helm repo update chaos-mesh
helm upgrade --install chaos-mesh chaos-mesh/chaos-mesh \
  --namespace chaos-mesh --create-namespace \
  --version "$CHAOS_MESH_VERSION" \
  --set chaosDaemon.runtime=containerd \
  --set chaosDaemon.socketPath=/run/containerd/containerd.sock \
  --wait --timeout 10m

# The shop app, rendered from the simulator's app model. Its service images live under registry.acme.internal/shop/*:
# push or `kind load docker-image` them first, or those pods stay in ImagePullBackOff (Redis and PostgreSQL are public).
kubectl apply -f "$here/shop.yaml"

cat <<DONE

Cluster $CLUSTER_NAME is ready, with Chaos Mesh $CHAOS_MESH_VERSION and the shop app in namespace "shop".
  export KUBECONFIG=$KUBECONFIG_OUT
  kubectl -n shop get pods
DONE
