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

BIN="${1:-$(bash "$repo/scripts/k8s/install.sh")}"
if [[ -z "${BERTH_K8S_VERSION:-}" ]]; then
  [[ -x "$BIN/kube-apiserver" ]] || die "$BIN has no kube-apiserver (scripts/k8s/install.sh)"
fi
K8S_VERSION="${BERTH_K8S_VERSION:-$("$BIN/kube-apiserver" --version | awk '{print $2}')}"
[[ "$K8S_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "cannot tell the Kubernetes version of $BIN"
TAGS="selinux,notest,grpcnotrace"
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
mkdir -p "$mod" "$work/out"
info="$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION")"
gomod="$(jq -r .GoMod <<<"$info")"
[[ -f "$gomod" ]] || die "no go.mod for k8s.io/kubernetes@$K8S_VERSION"
staging_version="v0.${K8S_VERSION#v1.}"
(
  cd "$mod"
  go mod init berth.local/k8s-build >/dev/null 2>&1
  go mod edit -go="$(go mod edit -json "$gomod" | jq -r .Go)"
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  while read -r r; do
    go mod edit -replace="$r=$r@$staging_version"
  done < <(go mod edit -json "$gomod" |
    jq -r '.Replace[] | select(.New.Path | startswith("./staging/")) | .Old.Path')
)
commit="$(jq -r '.Origin.Hash // empty' "$(jq -r .Info <<<"$info")" 2>/dev/null || true)"
kv=(
  "gitVersion=$K8S_VERSION"
  "gitMajor=1"
  "gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
  "gitTreeState=clean"
  "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
)
[[ -n "$commit" ]] && kv+=("gitCommit=$commit")
ldflags="-s -w"
for r in "${kv[@]}"; do
  ldflags+=" -X 'k8s.io/client-go/pkg/version.$r' -X 'k8s.io/component-base/version.$r'"
done

start=$SECONDS
for cmd in "${todo[@]}"; do
  log "building $cmd $K8S_VERSION"
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath -tags "$TAGS" \
    -ldflags "$ldflags" -o "$work/out/$cmd" "k8s.io/kubernetes/cmd/$cmd") ||
    die "building $cmd failed"
  "$work/out/$cmd" --version 2>/dev/null | grep -q "$K8S_VERSION" ||
    [[ "$cmd" == kubeadm ]] || die "$cmd --version does not say $K8S_VERSION"
  install -m 0755 "$work/out/$cmd" "$BIN/$cmd.new"
  mv -f "$BIN/$cmd.new" "$BIN/$cmd"
done
"$BIN/kubeadm" version -o short | grep -qx "$K8S_VERSION" ||
  die "kubeadm version says: $("$BIN/kubeadm" version -o short)"
log "installed ${todo[*]} into $BIN in $((SECONDS - start)) s"
echo "$BIN"
