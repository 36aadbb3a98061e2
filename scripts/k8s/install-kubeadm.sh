#!/usr/bin/env bash
# Adds to the Kubernetes install directory of scripts/k8s/install.sh what a
# kubeadm node needs beyond it: kubeadm, kube-controller-manager and
# kube-scheduler, built the same way (a scratch module requiring
# k8s.io/kubernetes with its staging modules replaced by their published
# versions, upstream's tags and version ldflags, static). Builds only the
# binaries absent there; prints the directory on stdout.
#
#   scripts/k8s/install-kubeadm.sh [DIR]     DIR: default `scripts/k8s/install.sh`'s
#
# Environment: BERTH_K8S_VERSION (default: what DIR's kube-apiserver says).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"

log() { echo "k8s-install-kubeadm: $*" >&2; }
die() {
  echo "k8s-install-kubeadm: error: $*" >&2
  exit 1
}
# shellcheck source=lib/module.sh
source "$repo/scripts/k8s/lib/module.sh"

BIN="${1:-$(bash "$repo/scripts/k8s/install.sh")}"
if [[ -z "${BERTH_K8S_VERSION:-}" ]]; then
  [[ -x "$BIN/kube-apiserver" ]] || die "$BIN has no kube-apiserver (scripts/k8s/install.sh)"
fi
K8S_VERSION="${BERTH_K8S_VERSION:-$("$BIN/kube-apiserver" --version | awk '{print $2}')}"
[[ "$K8S_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "cannot tell the Kubernetes version of $BIN"
WANTED=(kubeadm kube-controller-manager kube-scheduler)

missing() {
  local b
  for b in "${WANTED[@]}"; do [[ -x "$BIN/$b" ]] || echo "$b"; done
}

[[ -z "$(missing)" ]] && {
  echo "$BIN"
  exit 0
}
command -v go >/dev/null || die "go not found"
command -v jq >/dev/null || die "jq not found"
# One build at a time per directory; a lock of its own, so that it does not
# wait for install.sh's builds.
mkdir -p "$BIN"
exec 8>"$BIN/.lock-kubeadm"
flock 8
mapfile -t todo < <(missing)
if [[ ${#todo[@]} -eq 0 ]]; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d /tmp/berth-kubeadm-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod"
mod="$work/kubernetes"
mkdir -p "$work/out"
k8s_module "$mod" "$K8S_VERSION"
ldflags="$(k8s_ldflags "$K8S_VERSION" "$K8S_COMMIT")"

start=$SECONDS
for cmd in "${todo[@]}"; do
  log "building $cmd $K8S_VERSION"
  k8s_build "$mod" "$cmd" 0 "$ldflags" "$work/out/$cmd" || die "building $cmd failed"
  "$work/out/$cmd" --version 2>/dev/null | grep -q "$K8S_VERSION" ||
    [[ "$cmd" == kubeadm ]] || die "$cmd --version does not say $K8S_VERSION"
  install -m 0755 "$work/out/$cmd" "$BIN/$cmd.new"
  mv -f "$BIN/$cmd.new" "$BIN/$cmd"
done
"$BIN/kubeadm" version -o short | grep -qx "$K8S_VERSION" ||
  die "kubeadm version says: $("$BIN/kubeadm" version -o short)"
log "installed ${todo[*]} into $BIN in $((SECONDS - start)) s"
echo "$BIN"
