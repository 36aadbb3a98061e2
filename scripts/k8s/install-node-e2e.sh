#!/usr/bin/env bash
# Installs what Kubernetes' node e2e suite (test/e2e_node) needs to run
# against berth, built from the Go module proxy at one Kubernetes version:
# e2e_node.test, the ginkgo v2 CLI at the version that Kubernetes' go.mod
# pins, kubelet (kept when scripts/k8s/install.sh already installed it),
# agnhost from test/images/agnhost and the files the suite's images add to
# it (test/images/{kitten,nautilus}/html, agnhost's porter certificate) in
# image-files/, for scripts/images/node-e2e.sh. Builds only what is missing
# or stamped with another version; the Go build cache is the default one.
#
#   scripts/k8s/install-node-e2e.sh [VERSION]    prints the install directory
#
# VERSION defaults to $BERTH_NODE_E2E_VERSION, else v1.37.2. Environment:
# BERTH_K8S_BIN (install directory, default /usr/local/lib/berth-k8s/VERSION).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

K8S_VERSION="${1:-${BERTH_NODE_E2E_VERSION:-v1.37.2}}"
BIN="${BERTH_K8S_BIN:-/usr/local/lib/berth-k8s/$K8S_VERSION}"

log() { echo "node-e2e-install: $*" >&2; }
die() {
  echo "node-e2e-install: error: $*" >&2
  exit 1
}
# shellcheck source=lib/module.sh
source "$here/lib/module.sh"
STAMP_TEXT="node-e2e kubernetes $K8S_VERSION tags $K8S_BUILD_TAGS"

installed() {
  local b
  for b in e2e_node.test ginkgo kubelet agnhost; do [[ -x "$BIN/$b" ]] || return 1; done
  [[ -d "$BIN/image-files" ]] || return 1
  [[ "$(cat "$BIN/.node-e2e-version" 2>/dev/null)" == "$STAMP_TEXT" ]]
}

if installed; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || die "go not found"
command -v jq >/dev/null || die "jq not found"
mkdir -p "$BIN"
# A lock of its own: install.sh holds .lock for its whole build, and the
# two build different binaries (kubelet is installed atomically by either).
exec 8>"$BIN/.node-e2e.lock"
flock 8
if installed; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d /tmp/berth-node-e2e-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod"
start=$SECONDS
mkdir -p "$work/out"

k8s_module "$work/kubernetes" "$K8S_VERSION"
ldflags="$(k8s_ldflags "$K8S_VERSION" "$K8S_COMMIT")"

# ginkgo: the CLI must match the library e2e_node.test links, so it is the
# version kubernetes requires, built with ginkgo's own go.mod.
ginkgo_version="$(k8s_required "$K8S_GOMOD" github.com/onsi/ginkgo/v2)"
[[ -n "$ginkgo_version" ]] || die "kubernetes $K8S_VERSION requires no github.com/onsi/ginkgo/v2"
log "building ginkgo $ginkgo_version"
GOFLAGS=-buildvcs=false GOBIN="$work/out" CGO_ENABLED=0 \
  go install -trimpath "github.com/onsi/ginkgo/v2/ginkgo@$ginkgo_version" ||
  die "building ginkgo failed"

if [[ -x "$BIN/kubelet" ]] && "$BIN/kubelet" --version | grep -qx "Kubernetes $K8S_VERSION"; then
  log "kubelet $K8S_VERSION already in $BIN"
else
  # kubelet links with cgo as upstream ships it.
  log "building kubelet"
  k8s_build "$work/kubernetes" kubelet 1 "$ldflags" "$work/out/kubelet" || die "building kubelet failed"
  "$work/out/kubelet" --version | grep -qx "Kubernetes $K8S_VERSION" ||
    die "kubelet --version says: $("$work/out/kubelet" --version)"
fi

# agnhost static, as test/images/agnhost/Makefile builds it.
log "building agnhost"
(cd "$work/kubernetes" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$work/out/agnhost" k8s.io/kubernetes/test/images/agnhost) ||
  die "building agnhost failed"
images="$(cd "$work/kubernetes" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .Dir)/test/images"
mkdir -p "$work/out/image-files/kitten" "$work/out/image-files/nautilus" "$work/out/image-files/agnhost"
cp "$images/kitten/html/"* "$work/out/image-files/kitten/"
cp "$images/nautilus/html/"* "$work/out/image-files/nautilus/"
cp "$images/agnhost/porter/localhost.crt" "$images/agnhost/porter/localhost.key" \
  "$work/out/image-files/agnhost/"

# e2e_node.test as hack/make-rules/test-e2e-node.sh builds it: a test
# binary (go test -c) of the package, with the release tags.
log "building e2e_node.test (the long part: about 35 minutes cold on 2 busy cores)"
(cd "$work/kubernetes" && CGO_ENABLED=1 go test -c -trimpath -tags "$K8S_BUILD_TAGS" \
  -ldflags "$ldflags" -o "$work/out/e2e_node.test" k8s.io/kubernetes/test/e2e_node) ||
  die "building e2e_node.test failed"

for b in e2e_node.test ginkgo kubelet agnhost; do
  [[ -f "$work/out/$b" ]] || continue
  install -m 0755 "$work/out/$b" "$BIN/$b.new"
  mv -f "$BIN/$b.new" "$BIN/$b"
done
rm -rf "$BIN/image-files.new" "$BIN/image-files"
cp -r "$work/out/image-files" "$BIN/image-files.new"
chmod -R a+rX,go-w "$BIN/image-files.new"
mv "$BIN/image-files.new" "$BIN/image-files"
echo "$STAMP_TEXT" >"$BIN/.node-e2e-version"
log "installed e2e_node.test ginkgo $ginkgo_version kubelet agnhost into $BIN in $((SECONDS - start)) s"
echo "$BIN"
