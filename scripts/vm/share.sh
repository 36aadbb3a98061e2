#!/usr/bin/env bash
# Stages the directory a guest mounts read-only at /mnt/share (vm_start DIR):
#
#   DIR/bin/             berth's binaries from $CARGO_TARGET_DIR/PROFILE/
#                        (berthd, berth-shim, berth-pinns, ...; berthd finds
#                        its helpers next to itself), crictl and critest
#   DIR/images/oci/      the test images as one OCI layout; each ref name is
#                        the image's path in the registry, e.g.
#                        e2e-test-images/busybox:1.29-2
#   DIR/images/refs.txt  those refs, one a line
#   DIR/load-images.sh   run in the guest: starts its registry on
#                        127.0.0.1:5000 and pushes every ref into it
#   DIR/bin/runc         runc at the pinned version: the RuntimeClass handler
#                        the node e2e suite's test-handler runs
#                        (BERTH_TEST_RUNC, or scripts/containerd/install.sh's)
#   DIR/k8s/             with --k8s K8S_BIN: the Kubernetes binaries
#                        scripts/k8s/install.sh installed there, with its
#                        version stamp (the guest's install.sh finds them),
#                        and e2e_node.test and ginkgo when
#                        scripts/k8s/install-node-e2e.sh put them there too
#   DIR/containerd/      with --containerd: containerd, ctr, its runc shim
#                        and runc as scripts/containerd/install.sh installed
#                        them, with its version stamp (the guest's install.sh
#                        finds them through BERTH_CONTAINERD_BIN)
#
#   scripts/vm/share.sh DIR [--profile debug|release] [--no-images] [--k8s K8S_BIN] [--node-e2e] [--containerd]
#
# --node-e2e (with --k8s, whose directory scripts/k8s/install-node-e2e.sh
# filled) adds the node e2e suite's stand-in images
# (scripts/images/node-e2e.sh) to the test images.
#
# Images are copied with skopeo from a registry on the host: the one at
# BERTH_VM_IMAGES_FROM (host:port) when set, e.g. while the critest stage's
# registry runs; otherwise a private one this script starts on
# BERTH_VM_IMAGES_PORT (default 5055, not critest's 5000), fills with
# scripts/images/build.sh and stops again.
#
# Environment: CARGO_TARGET_DIR (default ~/.cache/berth/target, as
# scripts/test.sh), BERTH_TOOLS_BIN (crictl and critest, default /usr/local/bin).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=../k8s/lib/registry.sh
source "$repo/scripts/k8s/lib/registry.sh"
target="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"
tools_bin="${BERTH_TOOLS_BIN:-/usr/local/bin}"

log() { echo "vm-share: $*" >&2; }
die() {
  echo "vm-share: error: $*" >&2
  exit 1
}
usage() {
  echo "usage: $0 DIR [--profile debug|release] [--no-images] [--k8s K8S_BIN] [--node-e2e] [--containerd]" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
dir="$1"
shift
profile=release
images=1
k8s_bin=""
node_e2e=0
containerd=0
while (($#)); do
  case "$1" in
  --profile)
    profile="${2:-}"
    shift 2 || usage
    ;;
  --no-images)
    images=0
    shift
    ;;
  --k8s)
    k8s_bin="${2:-}"
    shift 2 || usage
    ;;
  --node-e2e)
    node_e2e=1
    shift
    ;;
  --containerd)
    containerd=1
    shift
    ;;
  *) usage ;;
  esac
done
[[ "$profile" =~ ^[A-Za-z0-9_-]+$ ]] || usage

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
[[ "$dir/" != "$repo/"* ]] || die "DIR must be outside the repository ($repo)"
rm -rf "$dir/bin" "$dir/images" "$dir/load-images.sh" "$dir/k8s" "$dir/containerd"
mkdir -p "$dir/bin"

# ---------------------------------------------------------------- binaries

# The executables cargo put at the top of the profile dir are the workspace's
# binaries (build scripts and tests live in build/ and deps/).
bins="$target/$profile"
[[ -x "$bins/berthd" ]] || die "no $bins/berthd: build it first (cargo build --profile $profile)"
n=0
while IFS= read -r -d '' f; do
  cp "$f" "$dir/bin/"
  n=$((n + 1))
done < <(find "$bins" -maxdepth 1 -type f -perm -u+x -print0)
for helper in berth-shim berth-pinns; do
  [[ -x "$dir/bin/$helper" ]] || die "no $bins/$helper: berthd needs it next to itself"
done
for tool in crictl critest; do
  [[ -x "$tools_bin/$tool" ]] || die "no $tools_bin/$tool (scripts/install-deps.sh builds it)"
  cp "$tools_bin/$tool" "$dir/bin/"
done
runc="${BERTH_TEST_RUNC:-$(bash "$repo/scripts/containerd/install.sh")/runc}"
[[ -x "$runc" ]] || die "no runc at $runc (scripts/containerd/install.sh builds it)"
cp "$runc" "$dir/bin/runc"
log "binaries ($profile): $(cd "$dir/bin" && echo *)"

if [[ -n "$k8s_bin" ]]; then
  [[ -f "$k8s_bin/.version" ]] || die "no Kubernetes binaries in $k8s_bin (scripts/k8s/install.sh)"
  mkdir -p "$dir/k8s"
  # Hard links when on one file system: 300 MB copied on every run otherwise.
  # Files only: the node e2e suite keeps directories of its own there.
  for f in "$k8s_bin"/* "$k8s_bin/.version"; do
    [[ -f "$f" ]] || continue
    cp -l "$f" "$dir/k8s/" 2>/dev/null || cp "$f" "$dir/k8s/"
  done
  log "Kubernetes binaries: $(cat "$dir/k8s/.version")"
fi

if [[ "$containerd" == 1 ]]; then
  ctrd_bin="$(bash "$repo/scripts/containerd/install.sh")"
  mkdir -p "$dir/containerd"
  for f in containerd ctr containerd-shim-runc-v2 runc .version; do
    cp -l "$ctrd_bin/$f" "$dir/containerd/" 2>/dev/null || cp "$ctrd_bin/$f" "$dir/containerd/"
  done
  log "containerd: $(cat "$dir/containerd/.version")"
fi

install -m 0755 "$here/load-images.sh" "$dir/load-images.sh"
[[ "$images" == 1 ]] || exit 0

# ---------------------------------------------------------------- images

command -v skopeo >/dev/null || die "skopeo not found (see scripts/install-deps.sh)"
tmp="$(mktemp -d /tmp/berth-vm-share.XXXXXX)"
own_registry=""
cleanup() {
  if [[ -n "$own_registry" ]]; then
    BERTH_REGISTRY_ADDR="$own_registry" bash "$repo/scripts/registry.sh" stop "$tmp/registry" >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

src="${BERTH_VM_IMAGES_FROM:-}"
if [[ "$node_e2e" == 1 ]]; then
  [[ -z "$src" ]] || die "--node-e2e pushes to the private registry: unset BERTH_VM_IMAGES_FROM"
  [[ -n "$k8s_bin" ]] || die "--node-e2e needs --k8s K8S_BIN (scripts/k8s/install-node-e2e.sh's dir)"
fi
if [[ -z "$src" ]]; then
  own_registry="127.0.0.1:${BERTH_VM_IMAGES_PORT:-5055}"
  log "building the test images into a private registry on $own_registry"
  BERTH_REGISTRY_ADDR="$own_registry" bash "$repo/scripts/registry.sh" start "$tmp/registry" >&2
  bash "$repo/scripts/images/build.sh" "$own_registry" >"$tmp/images.log" 2>&1 || {
    tail -n 40 "$tmp/images.log" >&2
    die "scripts/images/build.sh failed"
  }
  if [[ "$node_e2e" == 1 ]]; then
    log "adding the node e2e suite's stand-in images"
    bash "$repo/scripts/images/node-e2e.sh" "$own_registry" "$k8s_bin" >"$tmp/node-e2e-images.log" 2>&1 || {
      tail -n 40 "$tmp/node-e2e-images.log" >&2
      die "scripts/images/node-e2e.sh failed"
    }
  fi
  src="$own_registry"
fi
curl -fsS -o /dev/null --max-time 5 "http://$src/v2/" || die "no registry answers on http://$src/v2/"

# Every repository and tag the registry holds.
refs="$dir/images/refs.txt"
mkdir -p "$dir/images"
registry_refs "$src" >"$refs" || die "cannot list the images of registry $src"
[[ -s "$refs" ]] || die "registry $src holds no images"

# One layout, so layers shared between images are stored once. One copy at
# a time: concurrent writers of one layout race on its index.json.
# --preserve-digests: the guest's registry serves the digests the host's did.
count=0
while read -r ref; do
  skopeo copy --quiet --src-tls-verify=false --preserve-digests \
    "docker://$src/$ref" "oci:$dir/images/oci:$ref" >&2 ||
    die "skopeo copy of $src/$ref failed"
  count=$((count + 1))
done <"$refs"
log "images: $count refs from $src in $dir/images/oci ($(du -sh "$dir/images/oci" | cut -f1))"
