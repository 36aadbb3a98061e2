#!/usr/bin/env bash
# Builds the stand-in images Kubernetes' node e2e suite (test/e2e_node,
# focus [NodeConformance]) pulls, and pushes them to a local registry under
# their upstream paths (registry.k8s.io/X -> REGISTRY/X; the runtime under
# test mirrors registry.k8s.io to REGISTRY).
#
#   scripts/images/node-e2e.sh REGISTRY K8S_BIN
#
# K8S_BIN is the directory of scripts/k8s/install-node-e2e.sh (agnhost and
# image-files/ of the same Kubernetes version). On top of the images of
# scripts/images/build.sh, built with a busybox of upstream's default applet
# set (the specs time their steps with `nmeter`, which Debian's busybox
# lacks): busybox compiled from Debian's source package with `make
# defconfig`, cached in BERTH_IMAGES_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/berth-images). The stand-ins:
#   busybox      that busybox and the host's glibc (upstream: busybox:1.37.0)
#   agnhost      busybox + /agnhost of the module, its porter certificate,
#                /uploads, user 1000 and group 50000 as upstream adds them,
#                and the host's curl and bash with their libraries (the
#                lifecycle hooks call curl, probe specs /bin/bash); ENTRYPOINT /agnhost, CMD pause (upstream:
#                alpine + curl, bash, dig, iproute2)
#   kitten, nautilus  agnhost + their html files, CMD test-webserver
#   nginx        build.sh's nginx stand-in (HTTP on 80)
#   nonewprivs   build.sh's (setuid nnp printing its effective uid)
#   nonroot      busybox, USER 1234
#   ipc-utils    busybox + the host's util-linux ipcmk, ipcs, ipcrm
#   glibc-dns-testing  busybox + the host's hostname (Debian's, glibc's
#                `hostname -f`); the specs run only that (upstream: Debian
#                with dnsutils and coredns)
#   pause        build.sh's static pause
# Not made: digest-pinned references (a digest cannot be reproduced), perl,
# node-perf, etcd, NPD, sample-apiserver, apparmor-loader; none is pulled by
# that focus's specs that run here (see
# tests/node-conformance-expected-failures.txt).
#
# Needs what scripts/images/build.sh needs, plus make and bzip2.
set -euo pipefail

usage() {
  echo "usage: $0 REGISTRY K8S_BIN" >&2
  exit 2
}
[[ $# -eq 2 && -n "$1" && -d "$2" ]] || usage
REGISTRY="${1%/}"
K8S_BIN="$(cd "$2" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { echo "node-e2e-images: $*" >&2; }
die() {
  echo "node-e2e-images: error: $*" >&2
  exit 1
}
for f in agnhost image-files/kitten image-files/nautilus image-files/agnhost/localhost.crt; do
  [[ -e "$K8S_BIN/$f" ]] || die "no $f in $K8S_BIN (scripts/k8s/install-node-e2e.sh)"
done
for tool in make bzip2 umoci skopeo ldd; do
  command -v "$tool" >/dev/null || die "$tool not found (see scripts/install-deps.sh)"
done

CACHE="${BERTH_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth-images}"
WORK="$(mktemp -d /tmp/berth-node-e2e-images.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
EPOCH=1700000000
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"

# ---------------------------------------------------------------- busybox

# busybox_binary: prints the path of a busybox with upstream's default
# config, building it from Debian's source package when not cached. The
# source comes through apt with a deb-src list of this script's own, so the
# host's apt configuration is left alone.
busybox_binary() {
  local apt="$CACHE/busybox-apt" src dir version out
  local -a opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
  out="$(find "$CACHE" -maxdepth 2 -path "$CACHE/busybox-*-defconfig/busybox" | sort -V | tail -n1)"
  if [[ -n "$out" ]]; then
    printf '%s\n' "$out"
    return
  fi
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/src"
  # shellcheck source=/dev/null
  . /etc/os-release
  echo "deb-src http://deb.debian.org/debian ${VERSION_CODENAME:-bookworm} main" >"$apt/sources.list"
  log "fetching Debian's busybox source package"
  apt-get "${opts[@]}" -qq update >&2 || die "apt-get update (deb-src) failed"
  (cd "$apt/src" && apt-get "${opts[@]}" -qq --download-only source busybox) >&2 ||
    die "apt-get source busybox failed"
  src="$(find "$apt/src" -maxdepth 1 -name 'busybox_*.orig.tar.*' | sort -V | tail -n1)"
  [[ -n "$src" ]] || die "no busybox orig tarball in $apt/src"
  version="$(basename "$src" | sed -E 's/^busybox_(.*)\.orig\.tar\..*$/\1/')"
  dir="$WORK/busybox-src"
  mkdir -p "$dir"
  tar -xf "$src" -C "$dir" --strip-components=1
  log "building busybox $version with its default config (a few minutes)"
  (cd "$dir" && make -s defconfig && nice make -s -j"$(nproc)") >"$WORK/busybox-build.log" 2>&1 || {
    tail -n 30 "$WORK/busybox-build.log" >&2
    die "building busybox failed"
  }
  "$dir/busybox" --list | grep -qx nmeter || die "the built busybox has no nmeter"
  out="$CACHE/busybox-$version-defconfig/busybox"
  mkdir -p "$(dirname "$out")"
  install -m 0755 "$dir/busybox" "$out.new"
  mv -f "$out.new" "$out"
  printf '%s\n' "$out"
}

BUSYBOX="$(busybox_binary)"
log "busybox: $("$BUSYBOX" | sed -n 1p)"

# The base images (busybox, nginx, nonewprivs, pause, ...) from build.sh,
# kept as an OCI layout in $WORK/base/oci.
BERTH_IMAGES_WORKDIR="$WORK/base" BERTH_IMAGES_NO_PUSH=1 BERTH_IMAGES_BUSYBOX="$BUSYBOX" \
  BERTH_IMAGES_CACHE="$CACHE" bash "$here/build.sh" "$REGISTRY" >"$WORK/build.log" 2>&1 || {
  tail -n 30 "$WORK/build.log" >&2
  die "scripts/images/build.sh failed"
}
OCI="$WORK/base/oci"

# ---------------------------------------------------------------- helpers

# layer FROM TO DIR DESCRIPTION: TO = FROM + a reproducible layer of DIR.
layer() {
  local from="$1" to="$2" dir="$3" desc="$4" tarball="$WORK/$2.tar"
  local -a entries
  mapfile -t entries < <(cd "$dir" && LC_ALL=C ls -A)
  tar --create --file "$tarball" --directory "$dir" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$EPOCH" --numeric-owner "${entries[@]}"
  umoci raw add-layer --image "$OCI:$from" --tag "$to" \
    --history.created "$CREATED" --history.created_by "$desc" "$tarball"
  rm -f "$tarball"
}

# config TAG [umoci config options...]
config() {
  local ref="$1"
  shift
  umoci config --image "$OCI:$ref" --created "$CREATED" \
    --history.created "$CREATED" --architecture amd64 --os linux "$@"
}

# fresh NAME: an empty staging directory.
fresh() {
  local d="$WORK/stage/$1"
  rm -rf "$d"
  mkdir -p "$d"
  chmod 0755 "$d"
  printf '%s\n' "$d"
}

# base_file PATH: a file of the busybox image's rootfs, as build.sh staged it.
base_file() { cat "$WORK/base/stage/rootfs/$1"; }

# ---------------------------------------------------------------- images

log "building the node e2e images"
# agnhost as test/images/agnhost/Dockerfile lays it out (WORKDIR /).
d="$(fresh agnhost)"
install -m 0755 "$K8S_BIN/agnhost" "$d/agnhost"
ln -s agnhost "$d/agnhost-2"
install -m 0644 "$K8S_BIN/image-files/agnhost/localhost.crt" "$d/localhost.crt"
install -m 0644 "$K8S_BIN/image-files/agnhost/localhost.key" "$d/localhost.key"
install -d -m 0755 "$d/uploads" "$d/etc" "$d/home"
install -d -m 0755 -o 1000 -g 1000 "$d/home/user-defined-in-image"
{
  base_file etc/passwd
  echo 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh'
} >"$d/etc/passwd"
{
  base_file etc/group
  echo 'user-defined-in-image:x:1000:'
  echo 'group-defined-in-image:x:50000:user-defined-in-image'
} >"$d/etc/group"
chmod 0644 "$d/etc/passwd" "$d/etc/group"
# curl and bash, which upstream's image has from alpine (the lifecycle
# hooks call curl, the probe specs run /bin/bash): the host's (Debian's
# packages), with the shared libraries the busybox rootfs lacks, at the
# paths the loader resolves them to.
for tool in /usr/bin/curl /bin/bash; do
  install -D -m 0755 "$tool" "$d$tool"
  while read -r lib; do
    [[ -e "$WORK/base/stage/rootfs$lib" || -e "$d$lib" ]] || install -D -m 0755 "$lib" "$d$lib"
  done < <(ldd "$tool" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
done
layer busybox agnhost "$d" "ADD agnhost (k8s.io/kubernetes/test/images/agnhost), porter certificate, users, curl, bash"
config agnhost --clear config.cmd --config.entrypoint /agnhost --config.cmd pause \
  --config.exposedports 80/tcp --config.exposedports 8080/tcp --config.exposedports 8081/tcp \
  --config.exposedports 9376/tcp --config.exposedports 5000/tcp

for name in kitten nautilus; do
  d="$(fresh "$name")"
  install -m 0644 "$K8S_BIN/image-files/$name/"* "$d/"
  layer agnhost "$name" "$d" "COPY html/ /"
  config "$name" --clear config.cmd --config.cmd test-webserver
done

d="$(fresh nonroot)"
install -d -m 0755 "$d/home"
layer busybox nonroot "$d" "nonroot"
config nonroot --config.user 1234

# glibc-dns-testing (upstream: Debian + dnsutils + coredns): the specs that
# pull it run `hostname` and `hostname -f`, whose glibc behaviour (the FQDN
# from /etc/hosts) is the point; Debian's hostname on the busybox rootfs,
# which has glibc and `hosts: files dns`.
d="$(fresh glibc-dns-testing)"
install -D -m 0755 "$(command -v hostname)" "$d/bin/hostname"
layer busybox glibc-dns-testing "$d" "hostname (the host's, Debian's package)"

d="$(fresh ipc-utils)"
for b in ipcmk ipcs ipcrm; do
  install -D -m 0755 "$(command -v "$b")" "$d/usr/bin/$b"
done
# util-linux's tools need only the glibc the busybox rootfs already has.
layer busybox ipc-utils "$d" "util-linux ipcmk, ipcs, ipcrm (host's)"

umoci gc --layout "$OCI"

# ---------------------------------------------------------------- push

PUSH=(
  "busybox e2e-test-images/busybox:1.37.0-2"
  "busybox e2e-test-images/busybox:1.37.0-1"
  "busybox e2e-test-images/busybox:1.36.1-1"
  "agnhost e2e-test-images/agnhost:2.66.1"
  "agnhost e2e-test-images/agnhost:2.55"
  "kitten e2e-test-images/kitten:1.8"
  "nautilus e2e-test-images/nautilus:1.8"
  "nginx e2e-test-images/nginx:1.27.0-2"
  "nginx e2e-test-images/nginx:1.28.0-2"
  "nonewprivs e2e-test-images/nonewprivs:1.4"
  "nonroot e2e-test-images/nonroot:1.5"
  "ipc-utils e2e-test-images/ipc-utils:1.4"
  "glibc-dns-testing e2e-test-images/glibc-dns-testing:2.1.1"
  "pause pause:3.10.2"
)
curl -fsS -o /dev/null "http://$REGISTRY/v2/" ||
  die "registry http://$REGISTRY/v2/ does not answer (scripts/registry.sh start DIR)"
log "pushing to $REGISTRY"
# One at a time: the registry may answer 500 to concurrent blob checks in
# one repository (see build.sh).
for entry in "${PUSH[@]}"; do
  read -r tag dest <<<"$entry"
  skopeo copy --quiet --dest-tls-verify=false "oci:$OCI:$tag" "docker://$REGISTRY/$dest" ||
    die "push of $tag to $REGISTRY/$dest failed"
  echo "$REGISTRY/$dest"
done
log "pushed ${#PUSH[@]} refs"
