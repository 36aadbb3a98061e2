#!/usr/bin/env bash
# Installs the pinned Kubernetes binaries the end-to-end stage runs: etcd and
# etcdctl, kube-apiserver, kubelet, kubectl (and kubeadm from 1.37 on), built
# from the Go module proxy (see /work/shared/KUBERNETES.md). Builds only
# when a binary is missing or the version stamp differs; the Go build cache
# is the default one, kept between runs like any build output.
#
#   scripts/k8s/install.sh          prints the install directory on stdout
#
# Environment: BERTH_K8S_BIN (install directory, default
# /usr/local/lib/berth-k8s/<kubernetes version>), BERTH_K8S_VERSION (default
# v1.37.2), BERTH_ETCD_VERSION (default: the one that version of Kubernetes
# pins, v3.7.0 for v1.37.2 and v3.6.8 for v1.36.4).
set -euo pipefail

K8S_VERSION="${BERTH_K8S_VERSION:-v1.37.2}"
# etcd as Kubernetes pins it (build/dependencies.yaml) for each version used.
case "$K8S_VERSION" in
v1.36.*) default_etcd=v3.6.8 ;;
*) default_etcd=v3.7.0 ;;
esac
ETCD_VERSION="${BERTH_ETCD_VERSION:-$default_etcd}"
BIN="${BERTH_K8S_BIN:-/usr/local/lib/berth-k8s/$K8S_VERSION}"
BINARIES=(etcd etcdctl kube-apiserver kubelet kubectl)
# kubeadm from 1.37 on (the kubeadm-made node); the skew run's v1.36.4
# install stays as it was built, so it is not rebuilt for a binary it
# does not use.
[[ "$K8S_VERSION" == v1.36.* ]] || BINARIES+=(kubeadm)
# shellcheck source=lib/module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/module.sh"
STAMP_TEXT="kubernetes $K8S_VERSION etcd $ETCD_VERSION tags $K8S_BUILD_TAGS"

log() { echo "k8s-install: $*" >&2; }
die() {
  echo "k8s-install: error: $*" >&2
  exit 1
}

installed() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
  [[ "$(cat "$BIN/.version" 2>/dev/null)" == "$STAMP_TEXT" ]]
}

if installed; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "go not found"
command -v jq >/dev/null || die "jq not found"
mkdir -p "$BIN"
# Two runs at once would build twice and race on the install; one waits.
exec 8>"$BIN/.lock"
flock 8
if installed; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d /tmp/berth-k8s-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod"

# The upstream commit, for --version's gitCommit, when the proxy names it.
origin_hash() { jq -r '.Origin.Hash // empty' "$1" 2>/dev/null || true; }

# ---- Kubernetes: the scratch module of lib/module.sh.
build_kubernetes() {
  local mod="$work/kubernetes" ldflags
  mkdir -p "$work/out"
  k8s_module "$mod" "$K8S_VERSION"
  ldflags="$(k8s_ldflags "$K8S_VERSION" "$K8S_COMMIT")"

  local cmd cgo
  for cmd in kubectl kubeadm kube-apiserver kubelet; do
    [[ " ${BINARIES[*]} " == *" $cmd "* ]] || continue
    # kubelet links with cgo as upstream ships it; the others are static.
    cgo=0
    [[ "$cmd" == kubelet ]] && cgo=1
    log "building $cmd (CGO_ENABLED=$cgo)"
    k8s_build "$mod" "$cmd" "$cgo" "$ldflags" "$work/out/$cmd" || die "building $cmd failed"
  done
}

# ---- etcd: a scratch module of its own, so its dependency versions are
# etcd's and not merged with Kubernetes'.
build_etcd() {
  local mod="$work/etcd" commit ldflags info
  mkdir -p "$mod" "$work/out"
  (
    cd "$mod"
    go mod init berth.local/etcd-build >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
      -require="go.etcd.io/etcd/etcdctl/v3@$ETCD_VERSION"
  )
  info="$(cd "$mod" && go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION")"
  commit="$(origin_hash "$(jq -r .Info <<<"$info")")"
  ldflags="-s -w"
  [[ -n "$commit" ]] && ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=${commit:0:8}"
  log "building etcd and etcdctl $ETCD_VERSION"
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
    -o "$work/out/etcd" go.etcd.io/etcd/server/v3) || die "building etcd failed"
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
    -o "$work/out/etcdctl" go.etcd.io/etcd/etcdctl/v3) || die "building etcdctl failed"
}

start=$SECONDS
build_etcd
build_kubernetes

# Check what was built says the pinned versions before installing it.
"$work/out/kubelet" --version | grep -qx "Kubernetes $K8S_VERSION" ||
  die "kubelet --version says: $("$work/out/kubelet" --version)"
# Captured first: grep -q stops reading at its match, and the writer of the
# lines after it would die of SIGPIPE, failing the pipe under pipefail.
etcd_says="$("$work/out/etcd" --version)"
grep -q "etcd Version: ${ETCD_VERSION#v}" <<<"$etcd_says" ||
  die "etcd --version says: $(head -n1 <<<"$etcd_says")"

for b in "${BINARIES[@]}"; do
  install -m 0755 "$work/out/$b" "$BIN/$b.new"
  mv -f "$BIN/$b.new" "$BIN/$b"
done
echo "$STAMP_TEXT" >"$BIN/.version"
log "installed ${BINARIES[*]} into $BIN in $((SECONDS - start)) s"
echo "$BIN"
