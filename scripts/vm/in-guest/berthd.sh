#!/usr/bin/env bash
# Inside the guest: starts or stops a berthd of the test stage's own, with
# the driver on "auto" (systemd here; BERTH_GUEST_DRIVER changes it), registry mirrors to the guest's local
# registry and a CNI bridge network of its own. BERTH_GUEST_RUNTIME_HANDLER=
# NAME=PATH also configures RuntimeClass handler NAME with the OCI runtime
# binary PATH.
#
#   berthd.sh start WORK_DIR BIN_DIR   socket at WORK_DIR/berth.sock
#   berthd.sh stop WORK_DIR            removes its pods, stops it by pid,
#                                      unmounts its state dir
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_scripts="$(cd "$here/../.." && pwd)"
# shellcheck source=../../lib/process.sh
source "$repo_scripts/lib/process.sh"
# shellcheck source=../../lib/cni.sh
source "$repo_scripts/lib/cni.sh"
# shellcheck source=../../lib/mounts.sh
source "$repo_scripts/lib/mounts.sh"
# shellcheck source=../../lib/berthd-config.sh
source "$repo_scripts/lib/berthd-config.sh"

cmd="${1:?usage: berthd.sh start|stop WORK_DIR [BIN_DIR]}"
work="${2:?WORK_DIR}"
mkdir -p "$work"
sock="$work/berth.sock"

case "$cmd" in
start)
  bin="${3:?BIN_DIR}"
  mkdir -p "$work/net.d"
  write_bridge_network "$work/net.d/99-berth.conflist" berth-guest berth-g0 \
    10.90.0.0/16 "$work/cni-ipam"
  extra_toml=""
  if [[ -n "${BERTH_GUEST_RUNTIME_HANDLER:-}" ]]; then
    handler="${BERTH_GUEST_RUNTIME_HANDLER%%=*}"
    handler_path="${BERTH_GUEST_RUNTIME_HANDLER#*=}"
    if [[ "$handler" == "$BERTH_GUEST_RUNTIME_HANDLER" || ! -x "$handler_path" ]]; then
      echo "BERTH_GUEST_RUNTIME_HANDLER must be NAME=PATH of an executable, not $BERTH_GUEST_RUNTIME_HANDLER" >&2
      exit 2
    fi
    extra_toml="[runtime_handlers.$handler]\nruntime_path = \"$handler_path\""
  fi
  write_berthd_config "$work/runtime-config.toml" "${BERTH_GUEST_DRIVER:-auto}" "$work/net.d" 127.0.0.1:5000 "$extra_toml"
  # The state dir on a tmpfs of its own, as /run is on a node: shims then
  # create containers in a trimmed mount table (berth-shim's mount_view),
  # here under systemd's shared mount propagation.
  state_tmpfs "$work/state"
  "$bin/berthd" --config "$work/runtime-config.toml" --listen "$sock" \
    --root "$work/root" --state "$work/state" --log-level "${BERTH_GUEST_LOG:-info}" \
    >"$work/berthd.log" 2>&1 &
  echo $! >"$work/berthd.pid"
  for _ in $(seq 600); do [[ -S "$sock" ]] && break; sleep 0.1; done
  if [[ ! -S "$sock" ]]; then
    cat "$work/berthd.log" >&2
    echo "berthd did not start" >&2
    exit 1
  fi
  ;;
stop)
  pid="$(recorded_pid "$work/berthd.pid" berthd)" || exit 0
  crictl --timeout 60s --runtime-endpoint "unix://$sock" rmp --all --force >/dev/null 2>&1 || true
  stop_pid "$pid" berthd
  ip link del berth-g0 2>/dev/null || true
  unmount_tree "$work/state"
  ;;
*)
  echo "usage: berthd.sh start|stop WORK_DIR [BIN_DIR]" >&2
  exit 2
  ;;
esac
