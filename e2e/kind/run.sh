#!/usr/bin/env bash
# `make e2e-kind`: a kind cluster, the image loaded into it, the chart installed with the demo
# model (no modelList: the demo-model sidecar answers), then e2e/test_deployed.py against it
# (the same scenarios `make test` runs against the chart on the local control plane).
#
# Needs a container engine for kind (docker, or podman with KIND_EXPERIMENTAL_PROVIDER=podman)
# and Go (kind is built from its module when not on PATH). Environment:
#   IMAGE            the image to test (default: the chart's appVersion tag); built with
#                    `make image` when the engine does not have it
#   KIND_CLUSTER     cluster name (default lestrade-e2e); KEEP_CLUSTER=1 keeps it afterwards
#   KIND_NODE_IMAGE  node image (default: the one kind v0.31.0 ships for Kubernetes 1.35)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
IMAGE=${IMAGE:?set IMAGE, e.g. ghcr.io/lestrade/lestrade:0.1.0}
KIND_VERSION=v0.31.0
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f}
CLUSTER=${KIND_CLUSTER:-lestrade-e2e}
RELEASE=lestrade
NAMESPACE=lestrade-system
state=.lestrade/kind
mkdir -p "$state"

binary() {  # the pinned builds `make binaries` made (helm, kubectl)
  "$PY" -c "from lestrade.localcluster import binary_path, ensure_binaries; ensure_binaries(['$1'], quiet=True); print(binary_path('$1'))"
}
HELM=$(binary helm)
KUBECTL=$(binary kubectl)
KIND=$(command -v kind || true)
if [[ -z $KIND ]]; then
  GOBIN="$PWD/.lestrade/tools/bin" go install "sigs.k8s.io/kind@$KIND_VERSION"
  KIND="$PWD/.lestrade/tools/bin/kind"
fi
ENGINE=docker
[[ ${KIND_EXPERIMENTAL_PROVIDER:-} == podman ]] && ENGINE=podman

# 1. the cluster
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  "$KIND" create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --config e2e/kind/cluster.yaml --wait 180s
fi
"$KIND" get kubeconfig --name "$CLUSTER" >"$state/kubeconfig"
export KUBECONFIG="$PWD/$state/kubeconfig"
cleanup() {
  [[ -n ${forward:-} ]] && kill "$forward" 2>/dev/null || true
  if [[ -z ${KEEP_CLUSTER:-} ]]; then "$KIND" delete cluster --name "$CLUSTER"; fi
}
trap cleanup EXIT

# 2. the image, built when the engine lacks it, then loaded into the node
if ! "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1; then
  IMAGE_BUILDER=$ENGINE IMAGE="$IMAGE" hack/image/build.sh
fi
"$ENGINE" save -o "$state/image.tar" "$IMAGE"
"$KIND" load image-archive "$state/image.tar" --name "$CLUSTER"

# 3. the chart, as a user installs it (the image is already on the node: pullPolicy Never)
"$HELM" upgrade --install "$RELEASE" charts/lestrade --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
"$KUBECTL" -n "$NAMESPACE" rollout status deployment/"$RELEASE" --timeout=180s

# 4. the API through its Service, and the scenarios
port=$("$PY" -c "from lestrade.localcluster.cluster import free_port; print(free_port())")
"$KUBECTL" -n "$NAMESPACE" port-forward "svc/$RELEASE" "$port:8080" >"$state/port-forward.log" 2>&1 &
forward=$!
for _ in $(seq 60); do
  curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 1
done
LESTRADE_TEST_KUBECONFIG="$KUBECONFIG" LESTRADE_E2E_API_URL="http://127.0.0.1:$port" \
  LESTRADE_E2E_RELEASE_NAMESPACE="$NAMESPACE" LESTRADE_E2E_NAMESPACE=lestrade-e2e \
  "$PY" -m pytest e2e/test_deployed.py -q -p no:cacheprovider || {
    "$KUBECTL" -n "$NAMESPACE" logs "deployment/$RELEASE" --all-containers --tail=100 || true
    exit 1
  }
