#!/usr/bin/env bash
# The escape suite (scripts/escape/suite.sh) on this host: a local registry
# with the test images, a berthd of its own (cgroupfs: the host has no
# systemd) on a private socket, root, state and CNI config, a plain
# container lifecycle through crictl (scripts/lib/lifecycle-smoke.sh), then
# every probe. The guest stage runs the same suite under systemd and cgroupfs
# (scripts/vm/in-guest/escape.sh).
#
#   scripts/escape.sh BERTHD_BINARY
#
# berthd runs from a scratch copy of BERTHD_BINARY's dir (berthd,
# berth-shim, berth-pinns): the runtime binary probes take handles on the
# helpers, so whatever they could reach is a copy (ESCAPE_BIN_DIR).
#
# Environment: ESCAPE_REGISTRY_PORT (local registry port, default 5000),
# ESCAPE_FOCUS (a regexp: only matching probes), ESCAPE_KEEP=1 keeps the
# work dir (berthd.log, the probes' configs).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
berthd="${1:?usage: $0 BERTHD_BINARY}"
registry="localhost:${ESCAPE_REGISTRY_PORT:-5000}"
export BERTH_REGISTRY_ADDR="127.0.0.1:${ESCAPE_REGISTRY_PORT:-5000}"

log() { echo "escape.sh: $*" >&2; }

# The registry port and the CNI bridge's name are shared with critest.sh.
exec 9>/run/lock/berth-critest.lock
flock 9
# shellcheck source=lib/process.sh
source "$repo/scripts/lib/process.sh"
# shellcheck source=lib/cni.sh
source "$repo/scripts/lib/cni.sh"
# shellcheck source=lib/berthd-config.sh
source "$repo/scripts/lib/berthd-config.sh"
# shellcheck source=lib/mounts.sh
source "$repo/scripts/lib/mounts.sh"
# shellcheck source=lib/test-berthd.sh
source "$repo/scripts/lib/test-berthd.sh"
# shellcheck source=lib/lifecycle-smoke.sh
source "$repo/scripts/lib/lifecycle-smoke.sh"

work="$(mktemp -d /tmp/berth-escape.XXXXXX)"
chmod 0711 "$work"
berthd_pid=""
state_mounted=""
cleanup() {
  local status=$?
  if [[ -n "$berthd_pid" ]] && kill -0 "$berthd_pid" 2>/dev/null; then
    crictl --timeout 60s --runtime-endpoint "unix://$work/berth.sock" rmp --all --force >/dev/null 2>&1 || true
    stop_pid "$berthd_pid" berthd
  fi
  bash "$repo/scripts/registry.sh" stop "$work/registry" >/dev/null 2>&1 || true
  [[ -z "$state_mounted" ]] || unmount_tree "$work/state"
  ip link del berth-esc0 2>/dev/null || true
  if [[ "${ESCAPE_KEEP:-0}" == 1 ]]; then
    log "work dir kept: $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "starting the local registry and pushing the test images"
push_test_images "$work" "$registry" || exit 1

mkdir -p "$work/bin"
for binary in berthd berth-shim berth-pinns; do
  cp "$(dirname "$berthd")/$binary" "$work/bin/$binary"
done

mkdir -p "$work/net.d"
write_bridge_network "$work/net.d/10-berth-escape.conflist" berth-escape berth-esc0 \
  10.91.0.0/24 "$work/cni-ipam"
write_berthd_config "$work/runtime-config.toml" cgroupfs "$work/net.d" "$registry"
state_tmpfs "$work/state"
state_mounted=1

log "starting berthd on $work/berth.sock"
start_test_berthd "$work/bin/berthd" "$work" || exit 1

# Before any probe: the berthd under test runs a container at all.
lifecycle_smoke "$work/berth.sock" docker.io/berth-test/escape:1 "$work/smoke" || {
  tail -n 20 "$work/berthd.log" >&2
  log "the berthd under test cannot run a container"
  exit 1
}

ESCAPE_DRIVER=cgroupfs ESCAPE_STATE_DIRS="$work/root $work/state" ESCAPE_BIN_DIR="$work/bin" \
  bash "$repo/scripts/escape/suite.sh" "$work/suite" "$work/berth.sock"
