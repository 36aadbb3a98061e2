#!/usr/bin/env bash
# Installs what berth's tests and conformance run need, only when missing:
# what the run command needs (scripts/install-run-deps.sh), then the test
# bench's Debian packages via apt-get; crictl and critest pinned to
# cri-tools v1.37.0.
set -euo pipefail

CRI_TOOLS_VERSION="${CRI_TOOLS_VERSION:-v1.37.0}"
TOOLS_BIN="${BERTH_TOOLS_BIN:-/usr/local/bin}"

APT_PACKAGES=(
  docker-registry              # local registry for image tests and critest
  apache2-utils zstd           # htpasswd and zstd layers for the image tests
  umoci skopeo                 # build and push the stand-in images; import tarballs
  openssl                      # private CA and certificates for the TLS mirror tests
  containernetworking-plugins  # real CNI plugins in /usr/lib/cni
  iproute2 iptables            # netns, veth, portmap
  busybox gcc libc6-dev        # stand-in image contents
  make bzip2                   # busybox from source for the node e2e images
  libseccomp-dev pkg-config    # libcontainer's seccomp support (berth-shim)
  jq curl psmisc
  qemu-system-x86 qemu-utils   # the VM harness's guest (scripts/vm/)
  mmdebstrap e2fsprogs         # its disk image: rootfs dir, mkfs.ext4 -d
  criu                         # CheckpointContainer (run time only; see docs/runtime.md "Checkpoints")
  crun                         # an OCI runtime for the RuntimeClass handler tests (docs/runtime.md)
)

log() { echo "install-deps: $*" >&2; }

bash "$(dirname "$0")/install-run-deps.sh"

# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"
apt_install_missing install-deps "${APT_PACKAGES[@]}"

mkdir -p "$TOOLS_BIN"

# Both tools are built from the pinned module source: `go install pkg@version`
# would also query the proxy's version list, which is not always served, and
# critest has no main package (it is a Ginkgo test binary) so it can only be
# built with `go test -c`, as cri-tools' own Makefile does.
stamp="$TOOLS_BIN/.cri-tools-version"
if [[ ! -x "$TOOLS_BIN/crictl" || ! -x "$TOOLS_BIN/critest" ||
      "$(cat "$stamp" 2>/dev/null)" != "$CRI_TOOLS_VERSION" ]]; then
  log "building crictl and critest $CRI_TOOLS_VERSION"
  src_dir="$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/cri-tools@${CRI_TOOLS_VERSION}" | jq -r .Dir)"
  work="$(mktemp -d)"
  cp -r "$src_dir/." "$work/"
  chmod -R u+w "$work"
  mod_flag=""
  [[ -d "$work/vendor" ]] || mod_flag="-mod=mod"
  version_flags="-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION}"
  (cd "$work" &&
    GOFLAGS="$mod_flag" go build -ldflags "$version_flags" -o "$TOOLS_BIN/crictl" ./cmd/crictl &&
    GOFLAGS="$mod_flag" go test -c -ldflags "$version_flags" -o "$TOOLS_BIN/critest" ./cmd/critest)
  echo "$CRI_TOOLS_VERSION" >"$stamp"
  rm -rf "$work"
fi
