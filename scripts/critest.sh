#!/usr/bin/env bash
# Runs the CRI conformance suite (critest v1.37.0) against a berthd of its
# own: a local registry with the stand-in images, berthd on a private socket,
# state dirs and CNI config dir, then compares the results with
# tests/critest-expected-failures.txt. Everything it starts it stops by pid.
#
#   scripts/critest.sh BERTHD_BINARY
#
# Environment: CRITEST_REGISTRY_PORT (local registry port, default 5000),
# CRITEST_METRICS_PORT (berthd's metrics endpoint, default 19464),
# CRITEST_TIMEOUT (suite timeout, default 20m), CRITEST_FOCUS (a
# regexp to run only some specs while developing; then the comparison with
# the expected-failures list covers only what ran), CRITEST_EXTRA_ARGS
# (more critest flags, split on whitespace, e.g. "--websocket-exec
# --websocket-attach --websocket-portforward"), CRITEST_RUNTIME_HANDLER=
# NAME=PATH (every pod runs under RuntimeClass handler NAME, configured with
# the OCI runtime binary PATH: critest's --runtime-handler; e.g.
# "runc=/usr/local/lib/berth-containerd/v2.4.2/runc"), CRITEST_SANDBOX_IMAGE=
# REF (with CRITEST_RUNTIME_HANDLER: the handler runs each pod's sandbox
# container of image REF, pulled before the suite, as runsc needs; e.g.
# "registry.k8s.io/pause:3.9", the local stand-in), CRITEST_KEEP=1 keeps
# the work dir (logs, report) for inspection.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
berthd="${1:?usage: $0 BERTHD_BINARY}"
suite_timeout="${CRITEST_TIMEOUT:-20m}"
expected="$repo/tests/critest-expected-failures.txt"
registry="localhost:${CRITEST_REGISTRY_PORT:-5000}"
export BERTH_REGISTRY_ADDR="127.0.0.1:${CRITEST_REGISTRY_PORT:-5000}"
metrics_addr="127.0.0.1:${CRITEST_METRICS_PORT:-19464}"

log() { echo "critest.sh: $*" >&2; }

# One run at a time on a machine: the runs share the CNI bridge name, its
# subnet and host ports 12000-12003.
exec 9>/run/lock/berth-critest.lock
if ! flock -n 9; then
  log "another critest run holds /run/lock/berth-critest.lock; waiting"
  flock 9
fi
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

work="$(mktemp -d /tmp/berth-critest.XXXXXX)"
# Searchable by all: a pod with a user namespace mounts its rootfs from
# inside it, as a host uid that must reach the state dir below.
chmod 0711 "$work"
berthd_pid=""
state_mounted=""
logdirs_before="$(ls -d /tmp/podLogTest* 2>/dev/null | sort || true)"
shm_before="$(ipcs -m | awk 'NR>3 && $2 ~ /^[0-9]+$/ {print $2}' | sort)"

cleanup() {
  local status=$?
  if [[ -n "$berthd_pid" ]] && kill -0 "$berthd_pid" 2>/dev/null; then
    # Pods and containers outlive berthd by design: remove them first.
    crictl --timeout 60s --runtime-endpoint "unix://$work/berth.sock" rmp --all --force >/dev/null 2>&1 || true
    stop_pid "$berthd_pid" berthd
  fi
  bash "$repo/scripts/registry.sh" stop "$work/registry" >/dev/null 2>&1 || true
  if [[ -n "$state_mounted" ]]; then
    unmount_tree "$work/state"
  fi
  # The CNI bridge plugin leaves its bridge behind by design; it is ours.
  ip link del berth-ct0 2>/dev/null || true
  # The HostIpc specs leave 1 MiB System V shared-memory segments behind.
  local shm_after id
  shm_after="$(ipcs -m | awk 'NR>3 && $2 ~ /^[0-9]+$/ && $5 == 1048576 {print $2}' | sort)"
  for id in $(comm -13 <(echo "$shm_before") <(echo "$shm_after")); do
    ipcrm -m "$id" 2>/dev/null || true
  done
  # critest makes pod log directories under /tmp and does not remove them.
  local dir
  for dir in $(comm -13 <(echo "$logdirs_before") <(ls -d /tmp/podLogTest* 2>/dev/null | sort || true)); do
    rm -rf "$dir"
  done
  if [[ "${CRITEST_KEEP:-0}" == 1 ]]; then
    log "work dir kept: $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in 12000 12001 12002 12003; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    log "host port $port is in use; the port-mapping specs need 12000-12003 free"
    exit 1
  fi
done

if ss -Hltn "sport = :${metrics_addr##*:}" | grep -q .; then
  log "port ${metrics_addr##*:} (berthd metrics) is in use; set CRITEST_METRICS_PORT"
  exit 1
fi

log "starting the local registry and pushing the stand-in images"
push_test_images "$work" "$registry" || exit 1

# A CNI network of its own, so /etc/cni/net.d is never touched.
mkdir -p "$work/net.d"
write_bridge_network "$work/net.d/10-berth-critest.conflist" berth-critest berth-ct0 \
  10.89.0.0/16 "$work/cni-ipam"

# Images resolve through mirrors, never a registry prefix (see
# shared CONFORMANCE.md): every upstream critest names maps to the local one.
extra_toml="[metrics]\nenabled = true\naddress = \"$metrics_addr\""
handler_args=()
if [[ -n "${CRITEST_RUNTIME_HANDLER:-}" ]]; then
  handler="${CRITEST_RUNTIME_HANDLER%%=*}"
  handler_path="${CRITEST_RUNTIME_HANDLER#*=}"
  [[ "$handler" != "$CRITEST_RUNTIME_HANDLER" && -x "$handler_path" ]] || {
    log "CRITEST_RUNTIME_HANDLER must be NAME=PATH of an executable, not $CRITEST_RUNTIME_HANDLER"
    exit 2
  }
  extra_toml+="\n[runtime_handlers.$handler]\nruntime_path = \"$handler_path\""
  if [[ -n "${CRITEST_SANDBOX_IMAGE:-}" ]]; then
    extra_toml+="\nsandbox_container = true\nsandbox_image = \"$CRITEST_SANDBOX_IMAGE\""
    log "its pods run a sandbox container of $CRITEST_SANDBOX_IMAGE"
  fi
  handler_args=(--runtime-handler "$handler")
  log "every pod runs under handler $handler ($handler_path)"
fi
write_berthd_config "$work/runtime-config.toml" cgroupfs "$work/net.d" "$registry" "$extra_toml"

# The state dir on a tmpfs of its own, as /run is on a node (shims then
# create containers in a trimmed mount table; berth-shim's mount_view).
state_tmpfs "$work/state"
state_mounted=1

log "starting berthd on $work/berth.sock"
start_test_berthd "$berthd" "$work" || exit 1
if [[ -n "${CRITEST_SANDBOX_IMAGE:-}" ]]; then
  crictl --runtime-endpoint "unix://$work/berth.sock" --image-endpoint "unix://$work/berth.sock" \
    pull "$CRITEST_SANDBOX_IMAGE" >/dev/null || {
    log "cannot pull the sandbox image $CRITEST_SANDBOX_IMAGE"
    exit 1
  }
fi

# AppArmor is disabled in this kernel and SELinux is absent: those specs
# cannot run here. Nothing else is skipped by us.
critest_args=(
  --runtime-endpoint "unix://$work/berth.sock"
  --image-endpoint "unix://$work/berth.sock"
  --ginkgo.skip 'AppArmor|SELinux'
  --ginkgo.timeout "$suite_timeout"
  --ginkgo.json-report "$work/report.json"
  --ginkgo.no-color
)
[[ -n "${CRITEST_FOCUS:-}" ]] && critest_args+=(--ginkgo.focus "$CRITEST_FOCUS")
critest_args+=("${handler_args[@]}")
if [[ -n "${CRITEST_EXTRA_ARGS:-}" ]]; then
  read -r -a extra_args <<<"$CRITEST_EXTRA_ARGS"
  critest_args+=("${extra_args[@]}")
  log "extra critest flags: ${extra_args[*]}"
fi

log "running critest (suite timeout $suite_timeout)"
set +e
(cd "$work" && critest "${critest_args[@]}" >"$work/critest.log" 2>&1)
critest_status=$?
set -e
log "critest exited with $critest_status"
if [[ ! -s "$work/report.json" ]]; then
  tail -n 60 "$work/critest.log" >&2
  log "critest wrote no report"
  exit 1
fi

# The metrics endpoint must have counted the suite's calls.
metrics_ok=1
if ! curl -sf "http://$metrics_addr/metrics" >"$work/metrics.txt"; then
  log "metrics endpoint http://$metrics_addr/metrics did not answer"
  metrics_ok=0
elif ! awk '/^berth_rpc_requests_total\{/ && $NF > 0 {found=1} END {exit !found}' "$work/metrics.txt"; then
  log "metrics endpoint shows no non-zero berth_rpc_requests_total counter"
  metrics_ok=0
else
  log "metrics: $(grep -c '^berth_rpc_requests_total{' "$work/metrics.txt") RPC counters, $(awk '/^berth_rpc_requests_total\{/ {n += $NF} END {print n}' "$work/metrics.txt") calls counted"
fi

set +e
python3 "$repo/scripts/critest_results.py" "$work/report.json" "$expected" \
  ${CRITEST_FOCUS:+--partial}
results_status=$?
set -e
[[ "$metrics_ok" == 1 ]] || exit 1
exit "$results_status"
