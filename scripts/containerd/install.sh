#!/usr/bin/env bash
# Installs the comparison runtime, containerd and runc at pinned versions,
# built from the Go module proxy (see /work/shared/BASELINE.md): containerd,
# ctr, containerd-shim-runc-v2 and runc, all in one directory. Builds only
# when a binary is missing or the version stamp differs; the Go build cache
# is the default one, kept between runs like any build output.
#
#   scripts/containerd/install.sh         prints the install directory on stdout
#   scripts/containerd/install.sh --dir   only prints it, installs nothing
#
# The pinned versions live here and nowhere else: containerd v2.4.2, the
# newest the proxy serves, and runc v1.5.2, the version that containerd
# release names in script/setup/runc-version.
#
# Environment: BERTH_CONTAINERD_BIN (install directory, default
# /usr/local/lib/berth-containerd/<containerd version>), BERTH_CONTAINERD_VERSION,
# BERTH_RUNC_VERSION.
set -euo pipefail

CONTAINERD_VERSION="${BERTH_CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${BERTH_RUNC_VERSION:-v1.5.2}"
BIN="${BERTH_CONTAINERD_BIN:-/usr/local/lib/berth-containerd/$CONTAINERD_VERSION}"
BINARIES=(containerd ctr containerd-shim-runc-v2 runc)
STAMP_TEXT="containerd $CONTAINERD_VERSION runc $RUNC_VERSION"

log() { echo "containerd-install: $*" >&2; }
die() {
  echo "containerd-install: error: $*" >&2
  exit 1
}

installed() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
  [[ "$(cat "$BIN/.version" 2>/dev/null)" == "$STAMP_TEXT" ]]
}

if [[ "${1:-}" == --dir ]] || installed; then
  echo "$BIN"
  exit 0
fi

export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
command -v go >/dev/null || die "go not found"
# runc's seccomp support links libseccomp through cgo; jq reads go's answers.
# shellcheck source=../lib/apt.sh
source "$(dirname "$0")/../lib/apt.sh"
apt_install_missing containerd-install libseccomp-dev pkg-config gcc libc6-dev jq

mkdir -p "$BIN"
# Two runs at once would build twice and race on the install; one waits.
exec 8>"$BIN/.lock"
flock 8
if installed; then
  echo "$BIN"
  exit 0
fi

work="$(mktemp -d /tmp/berth-containerd-build.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# The proxy has no VCS metadata, and the module zips have no vendor dir.
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=mod"

# source_of MODULE VERSION DEST: the module's source, writable, in DEST. Only
# an exact version is asked for: listing versions is not always served.
source_of() {
  local dir
  dir="$(cd "$work" && go mod download -json "$1@$2" | jq -r .Dir)"
  [[ -d "$dir" ]] || die "go mod download $1@$2 gave no source dir"
  cp -r "$dir/." "$3"
  chmod -R u+w "$3"
}

start=$SECONDS
mkdir -p "$work/out" "$work/containerd" "$work/runc"

# ---- containerd, ctr and the shim, as upstream's Makefile builds them.
pkg=github.com/containerd/containerd/v2
source_of "$pkg" "$CONTAINERD_VERSION" "$work/containerd"
ldflags="-X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Package=$pkg -s -w"
for cmd in containerd ctr; do
  log "building $cmd $CONTAINERD_VERSION"
  (cd "$work/containerd" && go build -buildmode=pie -tags urfave_cli_no_docs \
    -ldflags "$ldflags" -o "$work/out/$cmd" "./cmd/$cmd") || die "building $cmd failed"
done
log "building containerd-shim-runc-v2 $CONTAINERD_VERSION (static)"
(cd "$work/containerd" && CGO_ENABLED=0 go build -tags "urfave_cli_no_docs no_grpc" \
  -ldflags "$ldflags -extldflags -static" -o "$work/out/containerd-shim-runc-v2" \
  ./cmd/containerd-shim-runc-v2) || die "building containerd-shim-runc-v2 failed"

# ---- runc, as its Makefile does but without the libpathrs tag (a Rust C
# library Debian 12 does not package; runc then uses its pure-Go fallback).
source_of github.com/opencontainers/runc "$RUNC_VERSION" "$work/runc"
log "building runc $RUNC_VERSION"
(cd "$work/runc" && go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
  -o "$work/out/runc" .) || die "building runc failed"

# Check what was built says the pinned versions before installing it.
"$work/out/containerd" --version | grep -q " $CONTAINERD_VERSION" ||
  die "containerd --version says: $("$work/out/containerd" --version)"
# Captured first: grep -q stops reading at its match, and runc, writing the
# lines after it, would die of SIGPIPE and fail the pipe under pipefail.
runc_says="$("$work/out/runc" --version)"
grep -qx "runc version ${RUNC_VERSION#v}" <<<"$runc_says" ||
  die "runc --version says: $(head -n1 <<<"$runc_says")"
grep -q "^libseccomp:" <<<"$runc_says" || die "runc was built without seccomp"

for b in "${BINARIES[@]}"; do
  install -m 0755 "$work/out/$b" "$BIN/$b.new"
  mv -f "$BIN/$b.new" "$BIN/$b"
done
echo "$STAMP_TEXT" >"$BIN/.version"
log "installed ${BINARIES[*]} into $BIN in $((SECONDS - start)) s"
echo "$BIN"
