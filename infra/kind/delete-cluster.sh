#!/usr/bin/env bash
# Delete the kind cluster made by create-cluster.sh.
set -euo pipefail
kind delete cluster --name "${CLUSTER_NAME:-agent-sre}"
