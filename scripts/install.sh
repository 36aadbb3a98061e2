#!/usr/bin/env bash
# Installs berth on this machine as a systemd service:
#
#   /usr/local/bin/berthd
#   /usr/local/libexec/berth/{berth-shim,berth-pinns}   (berthd's default
#                                  helper_dir when it runs from /usr/local/bin)
#   /usr/local/lib/systemd/system/berthd.service       (contrib/systemd/)
#   /etc/berth/runtime-config.toml  from `berthd config default`, only if absent
#   /etc/crictl.yaml                pointing crictl at berth, only if absent
#   /usr/local/share/berth/install-manifest   what this script created
#
# then `systemctl daemon-reload` and `systemctl enable --now berthd` (a
# berthd already running is restarted: an upgrade; its containers keep
# running). scripts/uninstall.sh removes what the manifest lists.
#
#   scripts/install.sh [--bin-dir DIR] [--root DIR] [--no-start]
#
#   --bin-dir DIR  take berthd, berth-shim and berth-pinns from DIR (release
#                  binaries built elsewhere); default: build them with
#                  scripts/build-release.sh
#   --root DIR     install below DIR instead of / (staging a package or an
#                  image); implies --no-start
#   --no-start     do not reload systemd nor enable and start berthd
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

bin_dir=""
root=""
start=1
while (($#)); do
  case "$1" in
  --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
  --root) root="${2:?--root needs a directory}"; start=0; shift 2 ;;
  --no-start) start=0; shift ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
root="${root%/}"
[[ -z "$root" ]] || mkdir -p "$root"

log() { echo "install: $*" >&2; }
die() { echo "install: $*" >&2; exit 1; }

[[ -n "$root" || "$(id -u)" == 0 ]] || die "run as root (or stage with --root DIR)"
if [[ -z "$bin_dir" ]]; then
  log "building the release binaries (scripts/build-release.sh)"
  bash "$repo/scripts/build-release.sh"
  bin_dir="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}/release"
fi
for binary in berthd berth-shim berth-pinns; do
  [[ -x "$bin_dir/$binary" ]] || die "$bin_dir/$binary is missing or not executable"
done
unit_src="$repo/contrib/systemd/berthd.service"
[[ -f "$unit_src" ]] || die "$unit_src is missing"

share_dir="$root/usr/local/share/berth"
manifest="$share_dir/install-manifest"
# The manifest: one "file SHA256 PATH" or "dir - PATH" line per path this
# script created (paths without --root's prefix). A file is removed by
# uninstall only while it still has the content install gave it.
declare -A entries=()
order=()
if [[ -f "$manifest" ]]; then
  while read -r kind sum path; do
    [[ -n "${path:-}" ]] || continue
    [[ -v "entries[$path]" ]] || order+=("$path")
    entries[$path]="$kind $sum"
  done <"$manifest"
fi
record() { # record KIND SUM PATH
  [[ -v "entries[$3]" ]] || order+=("$3")
  entries[$3]="$1 $2"
}

# make_dir PATH: creates it and its missing parents, recording each it made.
make_dir() {
  local path="$1" missing=()
  while [[ "$path" != / && ! -d "$root$path" ]]; do
    missing=("$path" "${missing[@]}")
    path="$(dirname "$path")"
  done
  for path in "${missing[@]}"; do
    mkdir -m 0755 "$root$path"
    record dir - "$path"
  done
}

# put SRC DEST MODE: copies SRC to DEST through a temporary file and a
# rename, so that a running berthd or shim keeps its old binary.
put() {
  local src="$1" dest="$2" mode="$3"
  make_dir "$(dirname "$dest")"
  install -m "$mode" "$src" "$root$dest.berth-new"
  mv -f "$root$dest.berth-new" "$root$dest"
  record file "$(sha256sum <"$root$dest" | cut -d' ' -f1)" "$dest"
  log "installed $dest"
}

# put_if_absent DEST MODE: writes stdin to DEST unless DEST exists.
put_if_absent() {
  local dest="$1" mode="$2" tmp
  if [[ -e "$root$dest" ]]; then
    log "kept the existing $dest"
    cat >/dev/null
    return
  fi
  make_dir "$(dirname "$dest")"
  tmp="$(mktemp "$root$dest.XXXXXX")"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  mv "$tmp" "$root$dest"
  record file "$(sha256sum <"$root$dest" | cut -d' ' -f1)" "$dest"
  log "wrote $dest"
}

put "$bin_dir/berthd" /usr/local/bin/berthd 0755
put "$bin_dir/berth-shim" /usr/local/libexec/berth/berth-shim 0755
put "$bin_dir/berth-pinns" /usr/local/libexec/berth/berth-pinns 0755
put "$unit_src" /usr/local/lib/systemd/system/berthd.service 0644
# Not a pipe: put_if_absent records into this shell's manifest.
put_if_absent /etc/berth/runtime-config.toml 0644 < <("$root/usr/local/bin/berthd" config default)
socket="$("$root/usr/local/bin/berthd" --config "$root/etc/berth/runtime-config.toml" config |
  sed -n 's/^listen = "\(.*\)"$/\1/p')"
put_if_absent /etc/crictl.yaml 0644 <<YAML
runtime-endpoint: unix://${socket:-/run/berth/berth.sock}
image-endpoint: unix://${socket:-/run/berth/berth.sock}
timeout: 30
YAML

make_dir /usr/local/share/berth
record file - /usr/local/share/berth/install-manifest
tmp="$(mktemp "$manifest.XXXXXX")"
for path in "${order[@]}"; do
  echo "${entries[$path]} $path"
done >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$manifest"
log "manifest: $manifest"

if ((start)); then
  systemctl daemon-reload
  if systemctl is-active --quiet berthd; then
    log "berthd was running: restarting it on the new binary (containers keep running)"
    systemctl enable berthd
    systemctl restart berthd
  else
    systemctl enable --now berthd
  fi
  systemctl is-active --quiet berthd || die "berthd did not start: journalctl -u berthd"
  log "berthd $("$root/usr/local/bin/berthd" --version | cut -d' ' -f2-) is active"
fi
