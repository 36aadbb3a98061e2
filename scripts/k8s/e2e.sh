#!/usr/bin/env bash
# The Kubernetes end-to-end stage: a one-node cluster on loopback (etcd,
# kube-apiserver, kubelet v1.37.2 registered against a berthd of its own),
# then the scenarios in scripts/k8s/scenarios/, each printing `PASS <name>`
# or `FAIL <name>: <reason>`, and `k8s-e2e: N passed, N failed` at the end.
# Exits non-zero on any FAIL. It leaves the host as it found it: everything
# it starts is stopped by pid, kubelet's cgroups, iptables chains and mounts
# and the CNI bridge are removed, and the host's sysctls are never changed.
#
#   scripts/k8s/e2e.sh [BERTHD_BINARY]   (default $CARGO_TARGET_DIR/debug/berthd)
#
# Environment:
#   BERTH_K8S_FOCUS=<regexp>   run only the scenarios whose name matches
#   BERTH_K8S_KEEP=1           keep the work dir (logs of every component and
#                              scenario) after the run
#   BERTH_K8S_BIN              where scripts/k8s/install.sh installs the binaries
#   BERTH_K8S_VERSION          the Kubernetes to run (default v1.37.2); the
#                              version-skew run uses v1.36.4, the previous minor
#   BERTH_K8S_CGROUP_DRIVER    berthd's cgroup_driver (default cgroupfs; the
#                              guest stage uses auto, which resolves to systemd)
#   BERTH_K8S_EXPECT_DRIVER    the driver kubelet must take from berth
#                              (default: BERTH_K8S_CGROUP_DRIVER's)
#   BERTH_K8S_NODE_IP          kubelet's --node-ip; needed where kubelet finds
#                              none itself (no default route, as in the guest)
#   BERTH_K8S_START_TIMEOUT    seconds the API server and the node get to come
#                              up (default 120; more under emulation)
#   BERTH_K8S_REGISTRY         HOST:PORT of a registry that already holds the
#                              test images (scripts/images/build.sh); by default
#                              the stage starts its own and builds them
#   BERTH_K8S_RUNC             runc for the RuntimeClass handler "runc"
#                              (default: BERTH_TEST_RUNC, which
#                              scripts/test.sh sets); without it the
#                              runtime-class-runc scenario is left out
#   Ports on 127.0.0.1, each movable: BERTH_K8S_ETCD_PORT (23790),
#   BERTH_K8S_ETCD_PEER_PORT (23800), BERTH_K8S_APISERVER_PORT (16443),
#   BERTH_K8S_KUBELET_PORT (20250), BERTH_K8S_KUBELET_HEALTHZ_PORT (20248),
#   BERTH_K8S_REGISTRY_PORT (5000), BERTH_K8S_HOST_PORT (12080, the hostPort
#   scenario's).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
K8S_LIB="$repo/scripts/k8s/lib"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"
BERTHD="$(realpath "${1:-$CARGO_TARGET_DIR/debug/berthd}")"

ETCD_PORT="${BERTH_K8S_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${BERTH_K8S_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${BERTH_K8S_APISERVER_PORT:-16443}"
KUBELET_PORT="${BERTH_K8S_KUBELET_PORT:-20250}"
KUBELET_HEALTHZ_PORT="${BERTH_K8S_KUBELET_HEALTHZ_PORT:-20248}"
REGISTRY_PORT="${BERTH_K8S_REGISTRY_PORT:-5000}"
HOST_PORT="${BERTH_K8S_HOST_PORT:-12080}"
REGISTRY="${BERTH_K8S_REGISTRY:-localhost:$REGISTRY_PORT}"
CGROUP_DRIVER="${BERTH_K8S_CGROUP_DRIVER:-cgroupfs}"
START_TIMEOUT="${BERTH_K8S_START_TIMEOUT:-120}"
NODE_IP="${BERTH_K8S_NODE_IP:-}"
RUNC="${BERTH_K8S_RUNC:-${BERTH_TEST_RUNC:-}}"
[[ -z "$RUNC" || -x "$RUNC" ]] || { echo "k8s-e2e: runc $RUNC is not executable" >&2; exit 1; }
# The API server dials kubelet by the node's Hostname address, so the node
# is named after a host name that resolves to loopback.
NODE=localhost
NS=berth-e2e
CNI_BRIDGE=berth-k8s0
CNI_SUBNET=10.90.0.0/24

# shellcheck source=../lib/process.sh
source "$repo/scripts/lib/process.sh"
# shellcheck source=../lib/cni.sh
source "$repo/scripts/lib/cni.sh"
# shellcheck source=../lib/berthd-config.sh
source "$repo/scripts/lib/berthd-config.sh"
# shellcheck source=../lib/mounts.sh
source "$repo/scripts/lib/mounts.sh"
# shellcheck source=lib/host.sh
source "$K8S_LIB/host.sh"
# shellcheck source=lib/cluster.sh
source "$K8S_LIB/cluster.sh"
# shellcheck source=lib/scenario.sh
source "$K8S_LIB/scenario.sh"
# shellcheck source=lib/registry.sh
source "$K8S_LIB/registry.sh"

[[ -x "$BERTHD" ]] || { log "no berthd binary at $BERTHD"; exit 1; }
[[ "$(id -u)" == 0 ]] || { log "must run as root"; exit 1; }

# One run at a time on a machine, and never beside critest: both use the
# registry port and host ports, and CNI bridges in 10.88-10.90.
exec 9>/run/lock/berth-critest.lock
if ! flock -n 9; then
  log "another run holds /run/lock/berth-critest.lock; waiting"
  flock 9
fi

ports=(ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT HOST_PORT)
[[ -n "${BERTH_K8S_REGISTRY:-}" ]] || ports+=(REGISTRY_PORT)
for var in "${ports[@]}"; do
  if ss -Hltn "sport = :${!var}" | grep -q .; then
    log "port ${!var} is in use; move it with BERTH_K8S_$var"
    exit 1
  fi
done
host_check_clean

K8S_BIN="$(nice -n 10 bash "$repo/scripts/k8s/install.sh")"
# The minor version under test (BERTH_K8S_VERSION picks it, see
# scripts/k8s/install.sh): what a newer minor adds is switched on, and its
# scenarios run, only there, so the previous minor runs the same stage.
K8S_MINOR="$("$K8S_BIN/kubelet" --version | sed -n 's/^Kubernetes v1\.\([0-9]*\)\..*/\1/p')"
[[ -n "$K8S_MINOR" ]] || { log "cannot read the version of $K8S_BIN/kubelet"; exit 1; }
log "kubelet: $("$K8S_BIN/kubelet" --version)"
WORK="$(mktemp -d /tmp/berth-k8s-e2e.XXXXXX)"
# Searchable by others (not listable): libcontainer opens the rootfs of a
# hostUsers: false pod's container from inside its user namespace, through
# berthd's state dir below. The keys stay closed (make_credentials).
chmod 0711 "$WORK"
mkdir -p "$WORK/logs"
host_snapshot "$WORK"

cleanup() {
  local status=$?
  set +e
  stop_cluster
  [[ -n "${BERTH_K8S_REGISTRY:-}" ]] ||
    bash "$repo/scripts/registry.sh" stop "$WORK/registry" >/dev/null 2>&1
  unmount_tree "$WORK/kubelet"
  unmount_tree "$WORK/berth-state"
  unmount_tree "$WORK/berth-root"
  remove_kubepods_cgroups || status=1
  # berth-network's real-plugin tests use portmap's shared chains too:
  # their lock keeps them from adding rules while the chains go.
  (
    flock -w 120 7 || log "removing iptables chains without the berth-network test lock"
    remove_new_iptables "$WORK"
  ) 7>/run/lock/berth-network-real-plugin-tests.lock
  if [[ -e "$WORK/made-var-lib-kubelet" ]]; then
    rmdir /var/lib/kubelet || log "/var/lib/kubelet is not empty; left in place"
  fi
  remove_new_link "$WORK" "$CNI_BRIDGE"
  finish_work_dir "$WORK" "${BERTH_K8S_KEEP:-0}" || status=1
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# berthd runs from a copy, with the helpers it execs from its own directory:
# a build in a shared target dir must not swap binaries in mid-run.
mkdir -p "$WORK/bin"
cp "$BERTHD" "$(dirname "$BERTHD")/berth-shim" "$(dirname "$BERTHD")/berth-pinns" "$WORK/bin/"
BERTHD="$WORK/bin/berthd"
export KUBECACHEDIR="$WORK/kube-cache"
# kubectl as the cluster admin: the function for scripts, the array for
# commands that exec it (timeout, the terminal helper).
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$WORK/admin.kubeconfig")
kubectl() { "${KUBECTL[@]}" "$@"; }

start=$SECONDS
log "work dir $WORK; binaries from $K8S_BIN"
use_registry "$WORK" "$REGISTRY" "${BERTH_K8S_REGISTRY:-}" "$REGISTRY_PORT" \
  bash "$repo/scripts/images/build.sh" "$REGISTRY"
make_credentials
log "starting etcd, kube-apiserver, berthd and kubelet"
start_etcd
start_apiserver
start_berthd
start_kubelet
log "cluster up in $((SECONDS - start)) s"

# Each scenario file adds "name function" entries to SCENARIOS, in order.
SCENARIOS=()
for file in "$repo"/scripts/k8s/scenarios/*.sh; do
  # shellcheck disable=SC1090
  source "$file"
done
for entry in "${SCENARIOS[@]}"; do
  read -r name fn <<<"$entry"
  scenario "$name" "$fn"
done

echo "k8s-e2e: $PASSED passed, $FAILED failed"
if ((FAILED)); then
  log "berthd's last warnings and errors, and kubelet's last errors:"
  grep -E ' (WARN|ERROR) ' "$WORK/logs/berthd.log" | tail -n 15 | cut -c1-400 >&2 || true
  grep -E '^E[0-9]{4} ' "$WORK/logs/kubelet.log" | tail -n 15 | cut -c1-400 >&2 || true
  # A kubelet that died makes every later scenario fail: say so, with how.
  # (It is this shell's child: a dead one stays a zombie until waited for.)
  kubelet_state="$(ps -o stat= -p "${KUBELET_PID:-0}" 2>/dev/null || true)"
  if [[ -n "${KUBELET_PID:-}" && ( -z "$kubelet_state" || "$kubelet_state" == Z* ) ]]; then
    kubelet_status=0
    wait "$KUBELET_PID" 2>/dev/null || kubelet_status=$?
    log "kubelet (pid $KUBELET_PID) exited with status $kubelet_status; its log's last lines and the kernel's last messages:"
    tail -n 25 "$WORK/logs/kubelet.log" | cut -c1-400 >&2 || true
    dmesg 2>/dev/null | tail -n 15 >&2 || true
  fi
fi
log "stage took $((SECONDS - start)) s"
((FAILED == 0))
