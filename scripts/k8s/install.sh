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
# Upstream's release tags (hack/lib/golang.sh, non-debug builds).
TAGS="selinux,notest,grpcnotrace"
BINARIES=(etcd etcdctl kube-apiserver kubelet kubectl)
# kubeadm from 1.37 on (the kubeadm-made node); the skew run's v1.36.4
# install stays as it was built, so it is not rebuilt for a binary it
# does not use.
[[ "$K8S_VERSION" == v1.36.* ]] || BINARIES+=(kubeadm)
STAMP_TEXT="kubernetes $K8S_VERSION etcd $ETCD_VERSION tags $TAGS"

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

# ---- Kubernetes: a scratch module requiring k8s.io/kubernetes, with every
# staging module its go.mod replaces by ./staging/... replaced by the
# published v0.<minor>.<patch> instead (the proxy cannot serve ./staging).
build_kubernetes() {
  local mod="$work/kubernetes" info gomod staging_version commit ldflags r
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
  log "kubernetes $K8S_VERSION: $(grep -c '=> k8s.io/' "$mod/go.mod") staging modules replaced by $staging_version"

  commit="$(origin_hash "$(jq -r .Info <<<"$info")")"
  # Upstream's version ldflags (hack/lib/version.sh) for both version packages.
  local -a kv=(
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

  local cmd cgo
  for cmd in kubectl kubeadm kube-apiserver kubelet; do
    [[ " ${BINARIES[*]} " == *" $cmd "* ]] || continue
    # kubelet links with cgo as upstream ships it; the others are static.
    cgo=0
    [[ "$cmd" == kubelet ]] && cgo=1
    log "building $cmd (CGO_ENABLED=$cgo)"
    (cd "$mod" && CGO_ENABLED=$cgo go build -trimpath -tags "$TAGS" \
      -ldflags "$ldflags" -o "$work/out/$cmd" "k8s.io/kubernetes/cmd/$cmd") ||
      die "building $cmd failed"
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
"$work/out/etcd" --version | grep -q "etcd Version: ${ETCD_VERSION#v}" ||
  die "etcd --version says: $("$work/out/etcd" --version | head -n1)"

for b in "${BINARIES[@]}"; do
  install -m 0755 "$work/out/$b" "$BIN/$b.new"
  mv -f "$BIN/$b.new" "$BIN/$b"
done
echo "$STAMP_TEXT" >"$BIN/.version"
log "installed ${BINARIES[*]} into $BIN in $((SECONDS - start)) s"
echo "$BIN"
