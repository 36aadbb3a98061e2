#!/usr/bin/env bash
# Removes what scripts/install.sh installed, as its manifest
# (/usr/local/share/berth/install-manifest) lists it:
#
#   1. while berthd runs: every pod sandbox berth runs is removed through
#      crictl (their containers, mounts and cgroups with them; drain the
#      node first), then berthd is stopped and disabled;
#   2. each file the manifest lists that still has the content install gave
#      it is removed; one changed since (an edited config) stays, named,
#      unless --purge;
#      files install found in place (a crictl.yaml of the operator's) were
#      never in the manifest and stay;
#   3. each directory install created, when empty;
#   4. with --purge: also the files install made and someone changed since
#      (the config), and berth's data and state (root_dir, state_dir: by default
#      /var/lib/berth and /run/berth), whatever is still mounted below them
#      unmounted first.
#
#   scripts/uninstall.sh [--purge] [--root DIR]
set -euo pipefail

purge=0
root=""
while (($#)); do
  case "$1" in
  --purge) purge=1; shift ;;
  --root) root="${2:?--root needs a directory}"; shift 2 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "uninstall.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
root="${root%/}"
manifest="$root/usr/local/share/berth/install-manifest"

log() { echo "uninstall: $*" >&2; }
die() { echo "uninstall: $*" >&2; exit 1; }

[[ -n "$root" || "$(id -u)" == 0 ]] || die "run as root"
[[ -f "$manifest" ]] || die "no install manifest at $manifest: nothing installed by scripts/install.sh"

# The effective config names the socket and the directories to purge.
berthd="$root/usr/local/bin/berthd"
config_args=()
[[ -f "$root/etc/berth/runtime-config.toml" ]] &&
  config_args=(--config "$root/etc/berth/runtime-config.toml")
config_value() {
  [[ -x "$berthd" ]] || return 0
  "$berthd" "${config_args[@]}" config 2>/dev/null | sed -n "s/^$1 = \"\(.*\)\"\$/\1/p"
}
socket="$(config_value listen)"
root_dir="$(config_value root_dir)"
state_dir="$(config_value state_dir)"

if [[ -z "$root" ]] && systemctl is-active --quiet berthd 2>/dev/null; then
  if command -v crictl >/dev/null; then
    log "removing every pod sandbox berth runs"
    crictl --timeout 120s --runtime-endpoint "unix://${socket:-/run/berth/berth.sock}" \
      rmp --all --force >&2 || log "crictl rmp --all failed; containers may be left"
  else
    log "no crictl: pods berth runs are left running"
  fi
fi
if [[ -z "$root" ]] && systemctl cat berthd >/dev/null 2>&1; then
  log "stopping and disabling berthd"
  systemctl disable --now berthd >&2 || true
  # KillMode=process stops berthd alone: anything left in its cgroup (a
  # shim whose pod could not be removed) goes now.
  systemctl kill --signal=SIGKILL berthd 2>/dev/null || true
  systemctl reset-failed berthd 2>/dev/null || true
fi

dirs=()
while read -r kind sum path; do
  [[ -n "${path:-}" ]] || continue
  case "$kind" in
  file)
    [[ -e "$root$path" || -L "$root$path" ]] || continue
    if [[ "$sum" == - || "$(sha256sum <"$root$path" | cut -d' ' -f1)" == "$sum" ]]; then
      rm -f "$root$path"
      log "removed $path"
    elif ((purge)); then
      rm -f "$root$path"
      log "removed $path (changed since install; --purge)"
    else
      log "kept $path: changed since install"
    fi
    ;;
  dir) dirs+=("$path") ;;
  esac
done <"$manifest"
rm -f "$manifest"
# Deepest first; only when empty (something kept is still in it).
for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
  rmdir "$root${dirs[i]}" 2>/dev/null && log "removed ${dirs[i]}/" || true
done
[[ -z "$root" ]] && systemctl daemon-reload 2>/dev/null || true

if ((purge)); then
  for dir in "${root_dir:-/var/lib/berth}" "${state_dir:-/run/berth}"; do
    dir="$root$dir"
    [[ -e "$dir" ]] || continue
    while IFS= read -r target; do
      umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null ||
        log "cannot unmount $target"
    done < <(findmnt -rn -o TARGET | awk -v d="$dir" '$0 == d || index($0, d "/") == 1' | sort -r)
    rm -rf --one-file-system "$dir"
    log "purged $dir"
  done
fi
log "done"
