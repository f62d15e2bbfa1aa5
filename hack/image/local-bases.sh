#!/usr/bin/env bash
# Stand-in base images for `make image` where no container registry is reachable (only Debian's
# package mirror is): a Debian bookworm root filesystem made with debootstrap, with Debian's
# Python 3.11 (the Python base) and, for the kubectl stage, the host's Go toolchain on top.
#
#   hack/image/local-bases.sh   # then: make image PYTHON_BASE=localhost/lestrade-base-python GO_BASE=localhost/lestrade-base-go
#
# They prove the Dockerfile's steps (frozen uv sync, kubectl from the pinned build, non-root,
# read-only root filesystem) with buildah; the image to ship is built from the digest-pinned
# official bases the Dockerfile names.
set -euo pipefail
BUILDAH=${BUILDAH:-buildah}
GOROOT_HOST=${GOROOT_HOST:-$(go env GOROOT)}
work=$(mktemp -d /tmp/lestrade-bases.XXXXXX)
trap 'rm -rf "$work"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$work/rootfs" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
# the official python image answers to `python` too
ln -sf python3 "$work/rootfs/usr/bin/python"
# Trust what this host trusts (a machine behind a TLS-inspecting proxy has its own CA there);
# pip and uv read the bundle named by these variables.
cp "${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$work/rootfs/etc/ssl/certs/ca-certificates.crt"

python=$($BUILDAH from scratch)
$BUILDAH copy "$python" "$work/rootfs" /
$BUILDAH config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["python3"]' \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$python"
$BUILDAH commit --rm "$python" localhost/lestrade-base-python

go=$($BUILDAH from localhost/lestrade-base-python)
$BUILDAH copy "$go" "$GOROOT_HOST" /usr/local/go
$BUILDAH config --env PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$go"
$BUILDAH commit --rm "$go" localhost/lestrade-base-go
echo "built localhost/lestrade-base-python and localhost/lestrade-base-go"
