#!/usr/bin/env bash
# Builds the multi-layer image of the cold-pull benchmark and pushes it:
#
#   scripts/bench/multilayer.sh IMAGES_WORKDIR REGISTRY
#
# IMAGES_WORKDIR is a BERTH_IMAGES_WORKDIR that scripts/images/build.sh filled
# (its OCI layout in oci/ and the busybox rootfs in stage/rootfs). The image,
# REGISTRY/bench/multilayer:1, is built the same way (GNU tar, umoci, skopeo)
# and shares no layer with any other image, so every pull downloads it all:
#   1. the busybox rootfs plus a marker file (about 3 MiB),
#   2. 3000 small text files in 30 directories (about 12 MiB, compressible),
#   3-6. one 10 MiB file of pseudo-random bytes each (incompressible).
# About 55 MiB unpacked, 45 MiB compressed. Same inputs, same digest.
set -euo pipefail

[[ $# -eq 2 ]] || {
  echo "usage: $0 IMAGES_WORKDIR REGISTRY" >&2
  exit 2
}
WORK="$(realpath "$1")"
REGISTRY="${2%/}"
OCI="$WORK/oci"
ROOT="$WORK/stage/rootfs"
STAGE="$WORK/stage/multilayer"
EPOCH=1700000000
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
TAG=multilayer

log() { echo "multilayer: $*" >&2; }
[[ -d "$OCI" && -d "$ROOT" ]] || {
  echo "multilayer: error: $WORK holds no build of scripts/images/build.sh" >&2
  exit 1
}

mktar() {
  tar --create --file "$2" --directory "$1" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$EPOCH" --numeric-owner .
}

add_layer() {
  local dir="$1" desc="$2" tarball="$WORK/stage/multilayer.tar"
  mktar "$dir" "$tarball"
  umoci raw add-layer --image "$OCI:$TAG" \
    --history.created "$CREATED" --history.created_by "$desc" "$tarball"
  rm -f "$tarball"
}

rm -rf "$STAGE"
mkdir -p "$STAGE"
umoci new --image "$OCI:$TAG"

log "layer 1: busybox rootfs"
cp -a "$ROOT" "$STAGE/1"
echo "berth bench multi-layer image" >"$STAGE/1/etc/bench-multilayer"
add_layer "$STAGE/1" "busybox rootfs, multi-layer benchmark image"

log "layers 2-6: small files and random data"
python3 - "$STAGE" <<'PY'
import os, random, sys
stage = sys.argv[1]
rng = random.Random(8)
d = os.path.join(stage, "2", "usr", "share", "bench")
for i in range(30):
    sub = os.path.join(d, f"dir{i:02d}")
    os.makedirs(sub)
    for j in range(100):
        words = " ".join(f"w{rng.randrange(100000)}" for _ in range(600))
        with open(os.path.join(sub, f"file{j:03d}.txt"), "w") as f:
            f.write(words + "\n")
for n in range(3, 7):
    p = os.path.join(stage, str(n), "opt", "bench")
    os.makedirs(p)
    with open(os.path.join(p, f"blob{n}.bin"), "wb") as f:
        f.write(rng.randbytes(10 << 20))
PY
add_layer "$STAGE/2" "3000 small files"
for n in 3 4 5 6; do
  add_layer "$STAGE/$n" "10 MiB of random bytes ($n)"
done
umoci config --image "$OCI:$TAG" --created "$CREATED" --history.created "$CREATED" \
  --architecture amd64 --os linux \
  --config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" --config.cmd sh
rm -rf "$STAGE"

skopeo copy --quiet --dest-tls-verify=false "oci:$OCI:$TAG" "docker://$REGISTRY/bench/multilayer:1"
log "pushed $REGISTRY/bench/multilayer:1 ($(du -sm "$OCI/blobs" | cut -f1) MiB of blobs in the layout)"
