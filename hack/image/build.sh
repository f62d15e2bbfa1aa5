#!/usr/bin/env bash
# `make image`: build the Dockerfile with whatever OCI builder this machine has - docker when
# its daemon answers, else buildah or podman (neither needs a daemon).
#
#   IMAGE=ghcr.io/lestrade/lestrade:0.1.0 hack/image/build.sh
#   PYTHON_BASE=... GO_BASE=...      other bases than the Dockerfile's digest-pinned ones
#   GO_MOD_CACHE=$(go env GOMODCACHE) mount a warm Go module cache into the kubectl stage
#   IMAGE_BUILDER=buildah             force a builder
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${IMAGE:?set IMAGE, e.g. ghcr.io/lestrade/lestrade:0.1.0}"

builder=${IMAGE_BUILDER:-}
if [[ -z $builder ]]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then builder=docker
  elif command -v buildah >/dev/null; then builder=buildah
  elif command -v podman >/dev/null; then builder=podman
  else
    echo "make image: no OCI builder (docker with a running daemon, buildah or podman)" >&2
    exit 1
  fi
fi

args=(build --tag "$IMAGE" --file Dockerfile)
[[ -n ${PYTHON_BASE:-} ]] && args+=(--build-arg "PYTHON_BASE=$PYTHON_BASE")
[[ -n ${GO_BASE:-} ]] && args+=(--build-arg "GO_BASE=$GO_BASE")
if [[ -n ${GO_MOD_CACHE:-} ]]; then
  [[ $builder == docker ]] && { echo "GO_MOD_CACHE needs buildah or podman (build-time volumes)" >&2; exit 1; }
  args+=(--volume "$GO_MOD_CACHE:/go-mod-cache")
fi
# chroot isolation: RUN steps need no OCI runtime or cgroup setup (works inside containers and
# sandboxes where crun/runc cannot start); BUILDAH_ISOLATION=oci to use the runtime instead.
[[ $builder != docker ]] && args+=(--layers --isolation "${BUILDAH_ISOLATION:-chroot}")
echo "make image: $builder ${args[*]} ."
exec "$builder" "${args[@]}" .
