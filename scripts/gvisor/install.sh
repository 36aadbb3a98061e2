#!/usr/bin/env bash
# Installs gVisor's runsc at a pinned version, built from the Go module
# proxy, for trying it as a RuntimeClass handler (docs/runtime.md "Runtime
# handlers": what works under berth and what does not). No test runs it.
# Builds only when the binary is missing or the version stamp differs;
# about 11 minutes on two busy cores.
#
#   scripts/gvisor/install.sh         prints the install directory on stdout
#   scripts/gvisor/install.sh --dir   only prints it, installs nothing
#
# The directory holds `runsc` and `runsc-systrap`, the handler's
# runtime_path: runsc with --platform=systrap (a handler has no runtime
# arguments of its own). gVisor's buildable Go source is its `go` branch,
# which the proxy serves only as pseudo-versions: the pin is one of them.
#
# Environment: BERTH_GVISOR_BIN (install directory, default
# /usr/local/lib/berth-gvisor/<version>), BERTH_GVISOR_VERSION.
set -euo pipefail

VERSION="${BERTH_GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}"
BIN="${BERTH_GVISOR_BIN:-/usr/local/lib/berth-gvisor/$VERSION}"

log() { echo "gvisor-install: $*" >&2; }
die() {
  echo "gvisor-install: error: $*" >&2
  exit 1
}

installed() {
  [[ -x "$BIN/runsc" && -x "$BIN/runsc-systrap" &&
    "$(cat "$BIN/.version" 2>/dev/null)" == "gvisor.dev/gvisor $VERSION" ]]
}

if [[ "${1:-}" == --dir ]] || installed; then
  echo "$BIN"
  exit 0
fi

export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
command -v go >/dev/null || die "go not found"

mkdir -p "$BIN"
exec 8>"$BIN/.lock"
flock 8
if installed; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d /tmp/berth-gvisor-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod"
start=$SECONDS
log "building runsc from gvisor.dev/gvisor@$VERSION"
(
  cd "$work"
  go mod init berth.local/gvisor-build >/dev/null 2>&1
  go mod edit -require="gvisor.dev/gvisor@$VERSION"
  CGO_ENABLED=0 go build -trimpath -o "$work/runsc" gvisor.dev/gvisor/runsc
)
install -m 0755 "$work/runsc" "$BIN/runsc"
cat >"$BIN/runsc-systrap" <<WRAP
#!/bin/sh
exec "$BIN/runsc" --platform=systrap "\$@"
WRAP
chmod 0755 "$BIN/runsc-systrap"
echo "gvisor.dev/gvisor $VERSION" >"$BIN/.version"
log "runsc $VERSION in $BIN ($((SECONDS - start)) s)"
echo "$BIN"
