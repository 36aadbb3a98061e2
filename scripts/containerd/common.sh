# Shared by scripts/containerd/start.sh, stop.sh and critest.sh; not meant
# to be run.
# shellcheck shell=bash

log() { echo "containerd: $*" >&2; }
die() {
  echo "containerd: error: $*" >&2
  exit 1
}

# The pinned containerd, ctr, shim and runc (scripts/containerd/install.sh)
# come first, so that every containerd, ctr and runc below is that one.
CONTAINERD_BIN="$(bash "$(dirname "${BASH_SOURCE[0]}")/install.sh" --dir)"
export PATH="$CONTAINERD_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"

# set_paths DIR: the layout of a containerd instance in DIR.
set_paths() {
  mkdir -p "$1"
  DIR="$(cd "$1" && pwd)"
  CONFIG="$DIR/config.toml"
  SOCK="$DIR/containerd.sock"
  PIDFILE="$DIR/containerd.pid"
  LOGFILE="$DIR/containerd.log"
}

# shellcheck source=../lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/process.sh"

# running_pid: the recorded pid, if that process is alive and is containerd
# started with our config.
running_pid() { recorded_pid "$PIDFILE" "--config $CONFIG"; }

ctr_() { ctr --address "$SOCK" "$@"; }

# answers: the gRPC socket serves and the CRI plugin loaded.
answers() {
  [[ -S "$SOCK" ]] || return 1
  ctr_ --timeout 2s version >/dev/null 2>&1 || return 1
  ctr_ --timeout 2s plugins ls 2>/dev/null | awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" {print $NF}' | grep -qx ok
}

# find_crictl: prints a crictl binary (BERTH_CRICTL, PATH, /usr/local/bin).
find_crictl() {
  local c
  for c in "${BERTH_CRICTL:-}" "$(command -v crictl 2>/dev/null || true)" /usr/local/bin/crictl; do
    [[ -n "$c" && -x "$c" ]] && {
      printf '%s\n' "$c"
      return 0
    }
  done
  return 1
}

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
  awk -v d="$1" '{
      mp = $5
      gsub(/\\040/, " ", mp)
      if (mp == d || index(mp, d "/") == 1) print length(mp) "\t" mp
    }' /proc/self/mountinfo | sort -rn | cut -f2-
}
