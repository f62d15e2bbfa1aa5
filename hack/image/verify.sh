#!/usr/bin/env bash
# Checks a built image (as root, with buildah) where no container runtime can start it (no daemon; crun/runc refused by
# the sandbox): its root filesystem is mounted READ-ONLY in a private mount namespace, /tmp is a
# fresh tmpfs (the chart's emptyDir), and commands run chrooted as the image's USER with its ENV.
#
#   IMAGE=localhost/lestrade:dev hack/image/verify.sh            # the checks below
#   IMAGE=... hack/image/verify.sh [VAR=value ...] python -m lestrade.operator   # run a command that way
#   (BIND_HOST_DIR=/tmp/... makes that host folder visible at the same path)
set -euo pipefail
IMAGE=${IMAGE:?set IMAGE}
BUILDAH=${BUILDAH:-buildah}
container=$($BUILDAH from --pull-never "$IMAGE")
root=$($BUILDAH mount "$container")
trap '$BUILDAH umount "$container" >/dev/null; $BUILDAH rm "$container" >/dev/null' EXIT
user=$($BUILDAH inspect --format '{{.OCIv1.Config.User}}' "$IMAGE")
workdir=$($BUILDAH inspect --format '{{.OCIv1.Config.WorkingDir}}' "$IMAGE")
mapfile -t image_env < <($BUILDAH inspect --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed '/^$/d')

in_image() {  # [VAR=value ...] command: as the image's user and env, on the read-only root fs
  unshare --mount --fork -- bash -c '
    set -e; root=$1; user=$2; workdir=$3; shift 3
    mount --bind "$root" "$root"; mount -o remount,bind,ro "$root"
    mount -t tmpfs -o size=256m,mode=1777 tmpfs "$root/tmp"
    mount --rbind /dev "$root/dev"; mount -t proc proc "$root/proc"
    mount --bind /etc/hosts "$root/etc/hosts"
    # a host folder the command needs (e.g. a kubeconfig), at the same path, under /tmp only
    if [[ -n ${BIND_HOST_DIR:-} ]]; then
      [[ $BIND_HOST_DIR == /tmp/* ]] || { echo "BIND_HOST_DIR must be under /tmp" >&2; exit 2; }
      mkdir -p "$root$BIND_HOST_DIR"; mount --bind "$BIND_HOST_DIR" "$root$BIND_HOST_DIR"
    fi
    exec chroot --userspec="$user" "$root" /usr/bin/env -i -C "$workdir" "$@"
  ' _ "$root" "$user" "$workdir" "${image_env[@]}" "$@"
}
trap 'exit 143' TERM INT

if [[ $# -gt 0 ]]; then in_image "$@"; exit; fi

echo "user: $user"
[[ ${user%%:*} =~ ^[0-9]+$ && ${user%%:*} -gt 0 ]] || { echo "FAIL: USER must be a numeric non-root UID"; exit 1; }
in_image id
for tool in gcc cc c++ g++ clang go make uv; do
  if in_image sh -c "command -v $tool" >/dev/null; then echo "FAIL: $tool in the final image"; exit 1; fi
done
echo "no compiler, go, make or uv on PATH"
in_image kubectl version --client
in_image python -c "
import pathlib, tempfile
import lestrade.operator.__main__, lestrade.api.__main__, lestrade.modelserver.__main__
try:
    pathlib.Path('/app/probe').write_text('x')
except OSError as exc:
    print('root filesystem read-only:', exc.strerror)
else:
    raise SystemExit('FAIL: /app is writable')
print('writable scratch:', tempfile.mkdtemp())
print('operator, API and model server import')"
in_image python -m lestrade.operator --help >/dev/null && echo "python -m lestrade.operator --help: ok"
echo "image checks passed"
