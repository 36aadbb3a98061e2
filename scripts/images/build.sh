#!/usr/bin/env bash
# Builds the stand-in images critest (cri-tools v1.37.0) pulls, and pushes
# them to a local registry. See /work/shared/CONFORMANCE.md, "Images: mirror,
# don't prefix".
#
#   scripts/images/build.sh REGISTRY          e.g. scripts/images/build.sh localhost:5000
#
# Every image is pushed as REGISTRY/<upstream path without its registry
# host>:<tag>, e.g. registry.k8s.io/e2e-test-images/busybox:1.29-2 ->
# localhost:5000/e2e-test-images/busybox:1.29-2; the runtime under test then
# mirrors registry.k8s.io, k8s.gcr.io, gcr.io, public.ecr.aws and docker.io to
# the registry.
#
# Images are built with GNU tar (fixed mtimes, sorted, numeric owners) and
# umoci into an OCI layout, and pushed with skopeo. Contents:
#   - busybox base: Debian's dynamic busybox (apt-get download busybox) with
#     hard-linked applets in /bin, the host glibc libraries it needs, official
#     busybox-image users and groups, CMD ["sh"], plus /usr/bin/pgrep and
#     /usr/bin/ipcs built from scripts/images/src.
#   - stand-ins built from scripts/images/src with gcc: nginx, httpd, nnp,
#     pause; and escape (busybox + escape-probe) for scripts/escape/.
# Same inputs give the same digests.
#
# Environment:
#   BERTH_IMAGES_WORKDIR  keep the build (OCI layout in $BERTH_IMAGES_WORKDIR/oci,
#                         pushed refs in $BERTH_IMAGES_WORKDIR/images.txt) there
#                         instead of a temporary directory removed on exit.
#   BERTH_IMAGES_CACHE    where the downloaded busybox .deb is kept
#                         (default ${XDG_CACHE_HOME:-$HOME/.cache}/berth-images).
#   BERTH_IMAGES_NO_PUSH=1  build only.
#   BERTH_IMAGES_BUSYBOX  a (dynamic) busybox binary to use instead of Debian's,
#                         e.g. one with upstream's applet set (scripts/images/node-e2e.sh).
#   BERTH_IMAGES_FORMAT   manifest format pushed: oci (default) or v2s2 (Docker
#                         schema 2, as most real registries serve; other digests).
#
# Needs: gcc libc6-dev umoci skopeo tar jq curl, apt-get and dpkg-deb (busybox .deb).
set -euo pipefail

usage() {
  echo "usage: $0 REGISTRY   (e.g. $0 localhost:5000)" >&2
  exit 2
}
[[ $# -eq 1 && -n "$1" ]] || usage
REGISTRY="${1%/}"

log() { echo "images: $*" >&2; }
die() {
  echo "images: error: $*" >&2
  exit 1
}

for tool in gcc umoci skopeo tar dpkg-deb ldd jq curl; do
  command -v "$tool" >/dev/null || die "$tool not found (see scripts/install-deps.sh)"
done

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/src"

# 2023-11-14T22:13:20Z: mtime of every file, and creation time of every image.
EPOCH=1700000000
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
BASE_PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

if [[ -n "${BERTH_IMAGES_WORKDIR:-}" ]]; then
  WORK="$(realpath -m "$BERTH_IMAGES_WORKDIR")"
  REPO="$(realpath -m "$SRC_DIR/../../..")"
  [[ "$WORK/" != "$REPO/"* ]] || die "BERTH_IMAGES_WORKDIR must be outside the repository ($REPO)"
  mkdir -p "$WORK"
  rm -rf "$WORK/oci" "$WORK/stage" "$WORK/bin" "$WORK/layers" "$WORK/deb" "$WORK/digests"
else
  WORK="$(mktemp -d /tmp/berth-images.XXXXXX)"
  trap 'rm -rf "$WORK"' EXIT
fi
OCI="$WORK/oci"
STAGE="$WORK/stage"
BIN="$WORK/bin"
LAYERS="$WORK/layers"
mkdir -p "$STAGE" "$BIN" "$LAYERS"

CACHE="${BERTH_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berth-images}"
mkdir -p "$CACHE"

# ---------------------------------------------------------------- helpers

# mktar DIR OUT: a reproducible, uncompressed layer tar of DIR's contents.
# Owners are kept numerically (stage files as root unless chowned).
mktar() {
  local dir="$1" out="$2"
  local -a entries
  mapfile -t entries < <(cd "$dir" && LC_ALL=C ls -A)
  ((${#entries[@]})) || die "empty layer $dir"
  tar --create --file "$out" --directory "$dir" \
    --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$EPOCH" --numeric-owner \
    "${entries[@]}"
}

# layer FROM_TAG TO_TAG DIR DESCRIPTION: TO_TAG = FROM_TAG + a layer of DIR.
# FROM_TAG "" starts from an empty image.
layer() {
  local from="$1" to="$2" dir="$3" desc="$4"
  local tarball="$LAYERS/$to.tar"
  mktar "$dir" "$tarball"
  if [[ -z "$from" ]]; then
    umoci new --image "$OCI:$to"
    umoci raw add-layer --image "$OCI:$to" \
      --history.created "$CREATED" --history.created_by "$desc" "$tarball"
  else
    umoci raw add-layer --image "$OCI:$from" --tag "$to" \
      --history.created "$CREATED" --history.created_by "$desc" "$tarball"
  fi
  rm -f "$tarball"
}

# config TAG [umoci config options...]: changes TAG's image config.
config() {
  local ref="$1"
  shift
  umoci config --image "$OCI:$ref" --created "$CREATED" \
    --history.created "$CREATED" --architecture amd64 --os linux "$@"
}

# retag FROM TO [umoci config options...]: TO = FROM with another config.
retag() {
  local from="$1" to="$2"
  shift 2
  umoci config --image "$OCI:$from" --tag "$to" --created "$CREATED" \
    --history.created "$CREATED" --architecture amd64 --os linux "$@"
}

# fresh NAME: an empty staging directory for a layer.
fresh() {
  local d="$STAGE/$1"
  rm -rf "$d"
  mkdir -p "$d"
  chmod 0755 "$d"
  printf '%s\n' "$d"
}

# put SRC DEST MODE: copies a file into a staging tree, creating parents 0755.
put() {
  local src="$1" dest="$2" mode="$3"
  install -d -m 0755 "$(dirname "$dest")"
  cp -L "$src" "$dest"
  chmod "$mode" "$dest"
}

# text DEST MODE: writes stdin into a staging tree file.
text() {
  local dest="$1" mode="$2"
  install -d -m 0755 "$(dirname "$dest")"
  cat >"$dest"
  chmod "$mode" "$dest"
}

# ---------------------------------------------------------------- binaries

log "compiling helpers"
CFLAGS=(-O2 -Wall -Wextra -s)
gcc "${CFLAGS[@]}" -o "$BIN/pgrep" "$SRC_DIR/pgrep.c"
gcc "${CFLAGS[@]}" -o "$BIN/ipcs" "$SRC_DIR/ipcs.c"
gcc "${CFLAGS[@]}" -DNGINX -o "$BIN/nginx" "$SRC_DIR/webserver.c"
gcc "${CFLAGS[@]}" -DHTTPD -o "$BIN/httpd" "$SRC_DIR/webserver.c"
gcc "${CFLAGS[@]}" -static -o "$BIN/nnp" "$SRC_DIR/nnp.c"
gcc "${CFLAGS[@]}" -static -o "$BIN/pause" "$SRC_DIR/pause.c"
gcc "${CFLAGS[@]}" -static -o "$BIN/escape-probe" "$SRC_DIR/escape-probe.c"

# Debian's dynamic busybox (not busybox-static: its shell runs applets without
# exec, which breaks the MaskedPaths spec).
busybox_deb() {
  local deb
  deb="$(find "$CACHE" -maxdepth 1 -name 'busybox_*_amd64.deb' | sort -V | tail -n1)"
  if [[ -z "$deb" ]]; then
    log "apt-get download busybox"
    (cd "$CACHE" && apt-get download -o APT::Sandbox::User=root -qq busybox) >&2 ||
      die "apt-get download busybox failed"
    deb="$(find "$CACHE" -maxdepth 1 -name 'busybox_*_amd64.deb' | sort -V | tail -n1)"
  fi
  [[ -n "$deb" ]] || die "no busybox .deb in $CACHE"
  printf '%s\n' "$deb"
}
if [[ -n "${BERTH_IMAGES_BUSYBOX:-}" ]]; then
  BUSYBOX="$BERTH_IMAGES_BUSYBOX"
  [[ -x "$BUSYBOX" ]] || die "BERTH_IMAGES_BUSYBOX $BUSYBOX is not an executable"
  BUSYBOX_DESC="$("$BUSYBOX" | sed -n 1p | cut -d' ' -f1-2)"
else
  DEB="$(busybox_deb)"
  log "busybox $(dpkg-deb -f "$DEB" Version) from $DEB"
  rm -rf "$WORK/deb"
  dpkg-deb -x "$DEB" "$WORK/deb"
  BUSYBOX="$WORK/deb/bin/busybox"
  [[ -x "$BUSYBOX" ]] || die "no bin/busybox in $DEB"
  BUSYBOX_DESC="Debian busybox $(dpkg-deb -f "$DEB" Version)"
fi

# ---------------------------------------------------------------- base rootfs

log "assembling busybox rootfs"
ROOT="$(fresh rootfs)"
for d in bin dev etc home lib lib64 proc root sys tmp usr usr/bin usr/sbin \
  usr/local usr/local/bin usr/local/sbin var var/spool var/spool/mail var/www; do
  install -d -m 0755 "$ROOT/$d"
done
chmod 0700 "$ROOT/root"
chmod 1777 "$ROOT/tmp"

put "$BUSYBOX" "$ROOT/bin/busybox" 0755
mapfile -t applets < <("$BUSYBOX" --list | LC_ALL=C sort)
for a in "${applets[@]}"; do
  case "$a" in busybox | linuxrc) continue ;; esac
  ln "$ROOT/bin/busybox" "$ROOT/bin/$a"
done
put "$BIN/pgrep" "$ROOT/usr/bin/pgrep" 0755
put "$BIN/ipcs" "$ROOT/usr/bin/ipcs" 0755

# Shared libraries of busybox and of the dynamic helpers, from the host, at
# the paths the host's loader resolves them to.
copy_libs() {
  local bin lib
  for bin in "$@"; do
    while read -r lib; do
      [[ -n "$lib" ]] || continue
      [[ -e "$ROOT$lib" ]] || put "$lib" "$ROOT$lib" 0755
    done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
  done
}
copy_libs "$BUSYBOX" "$BIN/pgrep" "$BIN/ipcs" "$BIN/nginx" "$BIN/httpd"
[[ -e "$ROOT/lib64/ld-linux-x86-64.so.2" ]] || die "dynamic loader missing from rootfs"

# Users and groups as in the official busybox image.
text "$ROOT/etc/passwd" 0644 <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
text "$ROOT/etc/group" 0644 <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
EOF
text "$ROOT/etc/shadow" 0600 <<'EOF'
root:*:10933:0:99999:7:::
daemon:*:10933:0:99999:7:::
bin:*:10933:0:99999:7:::
sys:*:10933:0:99999:7:::
sync:*:10933:0:99999:7:::
mail:*:10933:0:99999:7:::
www-data:*:10933:0:99999:7:::
operator:*:10933:0:99999:7:::
nobody:*:10933:0:99999:7:::
EOF
text "$ROOT/etc/nsswitch.conf" 0644 <<'EOF'
passwd:   files
group:    files
shadow:   files
hosts:    files dns
networks: files
services: files
protocols: files
EOF

# ---------------------------------------------------------------- OCI images

rm -rf "$OCI"
umoci init --layout "$OCI"

log "building images"
# busybox: the base of every stand-in except pause and the benchmark images.
layer "" busybox "$ROOT" "busybox rootfs ($BUSYBOX_DESC)"
config busybox --config.env "$BASE_PATH_ENV" --config.cmd sh

# Users (cri-tools images/image-user).
retag busybox user-uid --config.user 1002
retag busybox user-username --config.user www-data
retag busybox user-uid-group --config.user 1003:1004
retag busybox user-username-group --config.user www-data:1004

# Predefined group (cri-tools images/image-predefined-group):
#   adduser -u 1000 -D default-user; addgroup -g 50000 group-defined-in-image;
#   addgroup default-user group-defined-in-image; USER 1000
d="$(fresh predefined-group)"
install -d -m 0755 "$d/etc" "$d/home"
{
  cat "$ROOT/etc/passwd"
  echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh'
} | text "$d/etc/passwd" 0644
{
  cat "$ROOT/etc/group"
  echo 'default-user:x:1000:'
  echo 'group-defined-in-image:x:50000:default-user'
} | text "$d/etc/group" 0644
{
  cat "$ROOT/etc/shadow"
  echo 'default-user:!:19675:0:99999:7:::'
} | text "$d/etc/shadow" 0600
install -d -m 0755 -o 1000 -g 1000 "$d/home/default-user"
layer busybox predefined-group "$d" "adduser default-user (1000), group group-defined-in-image (50000)"
config predefined-group --config.user 1000

# Distinct images: busybox + one empty marker file each (cri-tools images/image-test).
for name in test-image-1 test-image-2 test-image-3 test-image-latest test-image-digest \
  test-image-tag-test:test test-image-tag-all:all test-image-tags:same-image; do
  tag="${name%%:*}"
  marker="${name#*:}"
  [[ "$name" == *:* ]] || marker="$name"
  d="$(fresh "$tag")"
  : >"$d/$marker"
  chmod 0644 "$d/$marker"
  layer busybox "$tag" "$d" "ADD $marker /$marker"
done

# nginx: PID 1 is "nginx: master process ...", /var/run/nginx.pid, HTTP on 80.
d="$(fresh nginx)"
put "$BIN/nginx" "$d/usr/sbin/nginx" 0755
text "$d/etc/nginx/conf.d/default.conf" 0644 <<'EOF'
server {
    listen       80;
    server_name  localhost;
}
EOF
install -d -m 0755 "$d/var/run" "$d/var/log/nginx" "$d/var/cache/nginx"
layer busybox nginx "$d" "nginx stand-in (scripts/images/src/webserver.c)"
config nginx --config.cmd nginx --config.cmd -g --config.cmd "daemon off;" \
  --config.exposedports 80/tcp --config.stopsignal SIGTERM

# hostnet-nginx (cri-tools images/hostnet-nginx): nginx listening on 12003.
d="$(fresh hostnet-nginx)"
text "$d/etc/nginx/conf.d/default.conf" 0644 <<'EOF'
server {
    listen       12003;
    server_name  localhost;
}
EOF
layer nginx hostnet-nginx "$d" "COPY default.conf /etc/nginx/conf.d/default.conf"
config hostnet-nginx --clear config.exposedports --config.exposedports 12003/tcp

# httpd: logs a line containing "httpd", then serves HTTP on port 80.
d="$(fresh httpd)"
put "$BIN/httpd" "$d/usr/local/apache2/bin/httpd" 0755
text "$d/usr/local/apache2/conf/httpd.conf" 0644 <<'EOF'
ServerRoot "/usr/local/apache2"
Listen 80
EOF
text "$d/usr/local/apache2/htdocs/index.html" 0644 <<'EOF'
<html><body><h1>It works!</h1></body></html>
EOF
install -d -m 0755 "$d/usr/local/apache2/logs"
text "$d/usr/local/bin/httpd-foreground" 0755 <<'EOF'
#!/bin/sh
set -e
# Apache gets grumpy about PID files pre-existing
rm -f /usr/local/apache2/logs/httpd.pid
exec httpd -DFOREGROUND "$@"
EOF
layer busybox httpd "$d" "httpd stand-in (scripts/images/src/webserver.c)"
config httpd --config.env "PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --config.env HTTPD_PREFIX=/usr/local/apache2 --config.workingdir /usr/local/apache2 \
  --config.cmd httpd-foreground --config.exposedports 80/tcp --config.stopsignal SIGWINCH

# nonewprivs: setuid-root /usr/local/bin/nnp printing "Effective uid: N", USER 1000.
d="$(fresh nonewprivs)"
put "$BIN/nnp" "$d/usr/local/bin/nnp" 4755
layer busybox nonewprivs "$d" "COPY nnp /usr/local/bin/nnp; chmod +s"
config nonewprivs --clear config.cmd --config.entrypoint /usr/local/bin/nnp --config.user 1000

# pause: only a static /pause, run as 65535:65535 like registry.k8s.io/pause:3.9.
d="$(fresh pause)"
put "$BIN/pause" "$d/pause" 0755
layer "" pause "$d" "ADD pause /pause"
config pause --config.entrypoint /pause --config.user 65535:65535

# escape: busybox + /usr/bin/escape-probe, the hostile workload of berth's
# escape suite (scripts/escape/).
d="$(fresh escape)"
put "$BIN/escape-probe" "$d/usr/bin/escape-probe" 0755
layer busybox escape "$d" "COPY escape-probe /usr/bin/escape-probe"

# Benchmark images: each a single layer of its own (the busybox rootfs plus a
# marker), sharing no layer with any other image, so every pull downloads.
BENCH_TAGS=(1.35.0-glibc 1-uclibc 1 1-glibc 1-musl)
for t in "${BENCH_TAGS[@]}"; do
  d="$STAGE/bench-$t"
  rm -rf "$d"
  cp -a "$ROOT" "$d"
  printf 'public.ecr.aws/docker/library/busybox:%s (berth stand-in)\n' "$t" >"$d/etc/busybox-image"
  chmod 0644 "$d/etc/busybox-image"
  layer "" "bench-$t" "$d" "busybox rootfs, benchmark image busybox:$t"
  config "bench-$t" --config.env "$BASE_PATH_ENV" --config.cmd sh
  rm -rf "$d"
done

umoci gc --layout "$OCI"

# ---------------------------------------------------------------- push

# local tag -> repository path and tag in the registry (upstream path without
# its registry host).
PUSH=(
  "busybox e2e-test-images/busybox:1.29-2"
  "nginx e2e-test-images/nginx:1.14-2"
  "httpd e2e-test-images/httpd:2.4.39-4"
  "nonewprivs e2e-test-images/nonewprivs:1.3"
  "hostnet-nginx k8s-staging-cri-tools/hostnet-nginx-amd64:latest"
  "user-uid k8s-staging-cri-tools/test-image-user-uid:latest"
  "user-username k8s-staging-cri-tools/test-image-user-username:latest"
  "user-uid-group k8s-staging-cri-tools/test-image-user-uid-group:latest"
  "user-username-group k8s-staging-cri-tools/test-image-user-username-group:latest"
  "predefined-group k8s-staging-cri-tools/test-image-predefined-group:latest"
  "test-image-1 k8s-staging-cri-tools/test-image-1:latest"
  "test-image-2 k8s-staging-cri-tools/test-image-2:latest"
  "test-image-3 k8s-staging-cri-tools/test-image-3:latest"
  "test-image-latest k8s-staging-cri-tools/test-image-latest:latest"
  "test-image-digest k8s-staging-cri-tools/test-image-digest:latest"
  "test-image-tag-test k8s-staging-cri-tools/test-image-tag:test"
  "test-image-tag-all k8s-staging-cri-tools/test-image-tag:all"
  "test-image-tags k8s-staging-cri-tools/test-image-tags:1"
  "test-image-tags k8s-staging-cri-tools/test-image-tags:2"
  "test-image-tags k8s-staging-cri-tools/test-image-tags:3"
  "pause pause:3.9"
  "escape berth-test/escape:1"
)
for t in "${BENCH_TAGS[@]}"; do
  PUSH+=("bench-$t docker/library/busybox:$t")
done

manifest_digest() {
  jq -r --arg t "$1" \
    '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' \
    "$OCI/index.json"
}

# images.txt: "REGISTRY/path:tag sha256:..." per pushed ref (the manifest
# digest as pushed; the OCI layout's with BERTH_IMAGES_NO_PUSH=1).
if [[ "${BERTH_IMAGES_NO_PUSH:-0}" == 1 ]]; then
  : >"$WORK/images.txt"
  for entry in "${PUSH[@]}"; do
    read -r tag dest <<<"$entry"
    printf '%s/%s %s\n' "$REGISTRY" "$dest" "$(manifest_digest "$tag")" >>"$WORK/images.txt"
  done
  log "built ${#PUSH[@]} refs in $OCI (not pushed)"
  exit 0
fi

curl -fsS -o /dev/null "http://$REGISTRY/v2/" ||
  die "registry http://$REGISTRY/v2/ does not answer (scripts/registry.sh start DIR)"

FORMAT_ARGS=()
case "${BERTH_IMAGES_FORMAT:-oci}" in
oci) ;;
v2s2) FORMAT_ARGS=(--format v2s2) ;;
*) die "BERTH_IMAGES_FORMAT must be oci or v2s2" ;;
esac

log "pushing to $REGISTRY"
DIGESTS="$WORK/digests"
rm -rf "$DIGESTS"
mkdir -p "$DIGESTS"
push_one() {
  local i="$1" tag="$2" dest="$3"
  skopeo copy --quiet --dest-tls-verify=false "${FORMAT_ARGS[@]}" \
    --digestfile "$DIGESTS/$i" "oci:$OCI:$tag" "docker://$REGISTRY/$dest" ||
    die "push of $tag to $REGISTRY/$dest failed"
}
# Two at a time; the busybox base goes first and alone, so that its layer is
# uploaded once. Two tags of one repository never go at once: the registry
# (distribution 2.8, filesystem storage) may answer 500 to concurrent blob
# checks in one repository (seen: test-image-tags:1 and :2).
pids=()
last_repo=""
for i in "${!PUSH[@]}"; do
  read -r tag dest <<<"${PUSH[$i]}"
  if ((i == 0)); then
    push_one "$i" "$tag" "$dest"
    continue
  fi
  repo="${dest%:*}"
  if [[ "$repo" == "$last_repo" ]]; then
    for p in "${pids[@]}"; do wait "$p" || die "push failed"; done
    pids=()
  fi
  last_repo="$repo"
  push_one "$i" "$tag" "$dest" &
  pids+=($!)
  if ((${#pids[@]} >= 2)); then
    wait "${pids[0]}" || die "push failed"
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || die "push failed"; done

: >"$WORK/images.txt"
for i in "${!PUSH[@]}"; do
  read -r tag dest <<<"${PUSH[$i]}"
  printf '%s/%s %s\n' "$REGISTRY" "$dest" "$(cat "$DIGESTS/$i")" >>"$WORK/images.txt"
done
log "pushed ${#PUSH[@]} refs:"
cat "$WORK/images.txt" >&2
