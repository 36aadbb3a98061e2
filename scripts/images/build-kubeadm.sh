#!/usr/bin/env bash
# Builds the control-plane images `kubeadm init` runs, from the static
# binaries of a Kubernetes install directory (scripts/k8s/install.sh plus
# scripts/k8s/install-kubeadm.sh), into one OCI layout whose ref names are the
# images' paths under registry.k8s.io, as scripts/vm/load-images.sh expects:
#
#   scripts/images/build-kubeadm.sh K8S_BIN LAYOUT
#
# The names and tags are the ones that directory's kubeadm asks for
# (`kubeadm config images list`): kube-apiserver, kube-controller-manager,
# kube-scheduler and etcd (each its binary in /usr/local/bin on a small
# rootfs: /etc/passwd, /etc/group, /tmp), and pause (the static stand-in of
# scripts/images/src/pause.c). kube-proxy and coredns are not built: the
# kubeadm node runs without those addons. Same inputs give the same digests.
#
# Needs: gcc umoci tar jq.
set -euo pipefail

[[ $# -eq 2 ]] || {
  echo "usage: $0 K8S_BIN LAYOUT" >&2
  exit 2
}
K8S_BIN="$(realpath "$1")"
OCI="$(realpath -m "$2")"

log() { echo "images-kubeadm: $*" >&2; }
die() {
  echo "images-kubeadm: error: $*" >&2
  exit 1
}
for tool in gcc umoci tar jq; do
  command -v "$tool" >/dev/null || die "$tool not found (see scripts/install-deps.sh)"
done
[[ -x "$K8S_BIN/kubeadm" ]] || die "no $K8S_BIN/kubeadm (scripts/k8s/install-kubeadm.sh)"
SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/src"

EPOCH=1700000000
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
WORK="$(mktemp -d /tmp/berth-images-kubeadm.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# mktar DIR OUT: a reproducible layer tar (as scripts/images/build.sh).
mktar() {
  tar --create --file "$2" --directory "$1" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$EPOCH" --numeric-owner --owner=0 --group=0 .
}

# image TAG DIR ENTRYPOINT...: a one-layer image of DIR.
image() {
  local tag="$1" dir="$2"
  shift 2
  mktar "$dir" "$WORK/$tag.tar"
  umoci new --image "$OCI:$tag"
  umoci raw add-layer --image "$OCI:$tag" --history.created "$CREATED" \
    --history.created_by "berth kubeadm image $tag" "$WORK/$tag.tar"
  local -a ep=()
  local a
  for a in "$@"; do ep+=(--config.entrypoint "$a"); done
  umoci config --image "$OCI:$tag" --created "$CREATED" --history.created "$CREATED" \
    --architecture amd64 --os linux \
    --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "${ep[@]}"
  rm -f "$WORK/$tag.tar"
}

# rootfs NAME BINARY...: a minimal root with the static binaries in /usr/local/bin.
rootfs() {
  local d="$WORK/root-$1" b
  shift
  install -d -m 0755 "$d/etc" "$d/usr/local/bin" "$d/var/run"
  install -d -m 1777 "$d/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
  chmod 0644 "$d/etc/passwd" "$d/etc/group"
  for b in "$@"; do
    [[ -x "$K8S_BIN/$b" ]] || die "no $K8S_BIN/$b"
    # Only static binaries run on this root.
    if ldd "$K8S_BIN/$b" >/dev/null 2>&1; then die "$K8S_BIN/$b is not static"; fi
    install -m 0755 "$K8S_BIN/$b" "$d/usr/local/bin/$b"
  done
  echo "$d"
}

rm -rf "$OCI"
mkdir -p "$(dirname "$OCI")"
umoci init --layout "$OCI"
mapfile -t wanted < <("$K8S_BIN/kubeadm" config images list \
  --kubernetes-version "$("$K8S_BIN/kubeadm" version -o short)" 2>/dev/null)
((${#wanted[@]})) || die "kubeadm config images list printed nothing"
n=0
for ref in "${wanted[@]}"; do
  path="${ref#registry.k8s.io/}"
  name="${path%:*}"
  case "$name" in
  kube-apiserver | kube-controller-manager | kube-scheduler)
    image "$path" "$(rootfs "$name" "$name")" "/usr/local/bin/$name"
    ;;
  etcd)
    image "$path" "$(rootfs etcd etcd etcdctl)" /usr/local/bin/etcd
    ;;
  pause)
    d="$WORK/root-pause"
    mkdir -p "$d"
    gcc -O2 -Wall -Wextra -s -static -o "$d/pause" "$SRC_DIR/pause.c"
    image "$path" "$d" /pause
    ;;
  *)
    log "skipping $ref (an addon the kubeadm node leaves out)"
    continue
    ;;
  esac
  n=$((n + 1))
done
umoci gc --layout "$OCI"
log "built $n images in $OCI ($(du -sh "$OCI" | cut -f1))"
