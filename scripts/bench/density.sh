#!/usr/bin/env bash
# A full node through a real kubelet, berth against containerd 2.4.2 + runc
# 1.5.2 (scripts/containerd/install.sh's pins), in the same run: pods created
# at once, then the node left idle.
#
#   scripts/bench/density.sh [--quick] [--keep]
#
# For each pod count and each runtime, one after the other (one kubelet on a
# machine), REPS times with the runtimes' order alternating from one
# repetition to the next, a fresh one-node cluster on loopback (etcd,
# kube-apiserver and kubelet v1.37.2 as the Kubernetes stage runs them,
# scripts/k8s/lib/) with the runtime alone: berthd (release build, log level
# info) or containerd; the same CNI bridge config, images from one local
# registry through each runtime's mirror, kubelet's defaults but maxPods.
# The images are pulled first, so no pull is timed. Then:
#   - PODS pods (one busybox container each, `sleep`) created at once with
#     kubectl: each pod's creation to Running and ready as the API server's
#     watch shows it, p50/p99 (scripts/bench/pod_start.py), and the
#     wall time until the last runs; kubelet's own pod-start SLI
#     (kubelet_pod_start_sli_duration_seconds from its /metrics), p50/p99
#     (scripts/bench/node_cost.py);
#   - at the first pod count's first repetition only: after 30 s to
#     settle, IDLE seconds of the node doing nothing but run them: CPU
#     seconds of the runtime's processes (daemon, shims, containerd's pause
#     processes) and of kubelet, and the runtime's memory at the end (RSS,
#     PSS).
# A pod count's repetitions pool their samples (the per-pod SLI p99 of 110
# pods three times is that of 330 pod starts), and a single-value metric is
# their mean: one run's p99 swings by a third from run to run on two cores.
# The table (scripts/bench/report.py) has containerd, berth and the ratio,
# and the targets of PERFORMANCE.md's node-density section.
#
# Modes: full (default): 110 pods (kubelet's default maxPods) with 300 s
# idle, then 250, three repetitions each; --quick: 20 pods with 60 s idle,
# once. BENCH_DENSITY_PODS ("110 250"), BENCH_DENSITY_IDLE (300) and
# BENCH_DENSITY_REPS (3) override them, BENCH_DENSITY_RUNTIMES ("berth
# containerd") picks the runtimes, BENCH_SETTLE_SECONDS (120) caps the wait
# for a quiet machine before each level's pods are created
# (scripts/lib/settle.sh), BENCH_DENSITY_BIN a directory with berthd,
# berth-shim and berth-pinns to run instead of the release build (a check of
# the script, not a number for the tables), BERTHD_LOG_LEVEL berthd's log
# filter (info). --keep keeps the work dir (logs of every component, the raw
# records).
#
# Locks: /run/lock/berth-critest.lock (one kubelet at a time, as the
# Kubernetes stages take it) and /run/lock/berth-bench.lock (the bench's
# registry port 5070 and its CNI bridge). Ports on 127.0.0.1 are the
# Kubernetes stage's (BERTH_K8S_*_PORT moves them). The host is left as it
# was found: kubelet's cgroups, new iptables chains, the bridge and mounts go.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
K8S_LIB="$repo/scripts/k8s/lib"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/berth/target}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$HOME/.cargo/bin${PATH:+:$PATH}"
PY=/usr/bin/python3

MODE=full
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --quick) MODE=quick ;;
    --keep) KEEP=1 ;;
    *)
      echo "usage: $0 [--quick] [--keep]" >&2
      exit 2
      ;;
  esac
done
if [[ "$MODE" == quick ]]; then
  LEVELS="${BENCH_DENSITY_PODS:-20}"
  IDLE="${BENCH_DENSITY_IDLE:-60}"
  REPS="${BENCH_DENSITY_REPS:-1}"
else
  LEVELS="${BENCH_DENSITY_PODS:-110 250}"
  IDLE="${BENCH_DENSITY_IDLE:-300}"
  REPS="${BENCH_DENSITY_REPS:-3}"
fi
RUNTIMES="${BENCH_DENSITY_RUNTIMES:-berth containerd}"

ETCD_PORT="${BERTH_K8S_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${BERTH_K8S_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${BERTH_K8S_APISERVER_PORT:-16443}"
KUBELET_PORT="${BERTH_K8S_KUBELET_PORT:-20250}"
KUBELET_HEALTHZ_PORT="${BERTH_K8S_KUBELET_HEALTHZ_PORT:-20248}"
REGISTRY_ADDR=127.0.0.1:5070
REGISTRY=localhost:5070
CGROUP_DRIVER=cgroupfs
START_TIMEOUT=180
NODE=localhost
NS=density
CNI_BRIDGE=berth-dn0
CNI_SUBNET=10.93.0.0/16
WORKLOAD_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.29-2
SANDBOX_IMAGE=registry.k8s.io/pause:3.9
# Pod creation to Running, for all of them: generous, a loaded machine.
RUNNING_TIMEOUT=900
# berthd's log filter: info for the tables; a profile may want
# 'info,berthd::server::instrument=debug' (each RPC's handler time).
BERTHD_LOG_LEVEL="${BERTHD_LOG_LEVEL:-info}"

# shellcheck source=../lib/process.sh
source "$repo/scripts/lib/process.sh"
# shellcheck source=../lib/cni.sh
source "$repo/scripts/lib/cni.sh"
# shellcheck source=../lib/berthd-config.sh
source "$repo/scripts/lib/berthd-config.sh"
# shellcheck source=../lib/mounts.sh
source "$repo/scripts/lib/mounts.sh"
# shellcheck source=../lib/settle.sh
source "$repo/scripts/lib/settle.sh"
# shellcheck source=../k8s/lib/host.sh
source "$K8S_LIB/host.sh"
# shellcheck source=../k8s/lib/cluster.sh
source "$K8S_LIB/cluster.sh"
log() { echo "density: $*" >&2; }

[[ "$(id -u)" == 0 ]] || { log "must run as root"; exit 1; }
exec 8>/run/lock/berth-bench.lock
flock -n 8 || { log "another bench holds /run/lock/berth-bench.lock"; exit 1; }
exec 9>/run/lock/berth-critest.lock
if ! flock -n 9; then
  log "another kubelet run holds /run/lock/berth-critest.lock; waiting"
  flock 9
fi
for var in ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT; do
  if ss -Hltn "sport = :${!var}" | grep -q .; then
    log "port ${!var} is in use; move it with BERTH_K8S_$var"
    exit 1
  fi
done
host_check_clean

log "installing what is missing"
bash "$repo/scripts/install-deps.sh" >&2
K8S_BIN="$(nice -n 10 bash "$repo/scripts/k8s/install.sh")"
K8S_MINOR="$("$K8S_BIN/kubelet" --version | sed -n 's/^Kubernetes v1\.\([0-9]*\)\..*/\1/p')"
CONTAINERD_BIN="$(bash "$repo/scripts/containerd/install.sh")"
BIN_DIR="${BENCH_DENSITY_BIN:-}"
if [[ -z "$BIN_DIR" ]]; then
  log "building berthd, berth-shim, berth-pinns (release) in $CARGO_TARGET_DIR"
  (cd "$repo" && cargo build --release --locked -p berthd -p berth-shim -p berth-pinns) >&2
  BIN_DIR="$CARGO_TARGET_DIR/release"
fi

base="$(mktemp -d /tmp/berth-density.XXXXXX)"
chmod 0711 "$base"
RESULTS="$base/results.jsonl"
: >"$RESULTS"
host_snapshot "$base"
# berthd runs from a copy: a build in the target dir must not swap it.
mkdir -p "$base/bin"
cp "$BIN_DIR/"{berthd,berth-shim,berth-pinns} "$base/bin/"
BERTHD="$base/bin/berthd"
export KUBECACHEDIR="$base/kube-cache"
KUBECTL=()
kubectl() { "${KUBECTL[@]}" "$@"; }
WORK=""
RT=""

# teardown: the cluster of the current level, then what it left on the host.
teardown() {
  [[ -n "$WORK" ]] || return 0
  stop_cluster
  if [[ "$RT" == containerd ]]; then
    bash "$repo/scripts/containerd/stop.sh" "$WORK/containerd" >"$WORK/logs/containerd-stop.log" 2>&1 ||
      log "scripts/containerd/stop.sh failed; see $WORK/logs/containerd-stop.log"
  fi
  unmount_tree "$WORK/kubelet"
  unmount_tree "$WORK/berth-state"
  unmount_tree "$WORK/berth-root"
  remove_kubepods_cgroups || log "kubelet's cgroups could not all be removed"
  remove_new_iptables "$base"
  remove_new_link "$base" "$CNI_BRIDGE"
  if [[ -e "$WORK/made-var-lib-kubelet" ]]; then
    rmdir /var/lib/kubelet 2>/dev/null || log "/var/lib/kubelet is not empty; left in place"
  fi
  WORK=""
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  set +e
  teardown
  BERTH_REGISTRY_ADDR="$REGISTRY_ADDR" bash "$repo/scripts/registry.sh" stop "$base/registry" >/dev/null 2>&1
  finish_work_dir "$base" "$KEEP" || status=1
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "registry on $REGISTRY_ADDR, images"
BERTH_REGISTRY_ADDR="$REGISTRY_ADDR" bash "$repo/scripts/registry.sh" start "$base/registry" >&2
BERTH_IMAGES_WORKDIR="$base/images" bash "$repo/scripts/images/build.sh" "$REGISTRY" >"$base/images.log" 2>&1 || {
  tail -n 20 "$base/images.log" >&2
  exit 1
}

# pods_yaml N: N pods on the node, one sleeping busybox container each,
# with a small request (the node's allocatable must hold 250 of them).
pods_yaml() {
  local i
  for ((i = 1; i <= $1; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: density-$i, namespace: $NS, labels: {app: density}}
spec:
  nodeName: $NODE
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: $WORKLOAD_IMAGE
    imagePullPolicy: IfNotPresent
    command: [sleep, "86400"]
    resources: {requests: {cpu: 1m, memory: 4Mi}}
EOF
  done
}

# level RUNTIME PODS IDLE_SECONDS REP: one cluster, PODS pods, the records.
level() {
  local rt="$1" pods="$2" idle="$3" label="$2 pods" endpoint daemon helpers
  RT="$rt"
  WORK="$base/$rt-$pods-$4"
  mkdir -p "$WORK/logs"
  KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$WORK/admin.kubeconfig")
  log "$rt, $pods pods: starting etcd, kube-apiserver, the runtime and kubelet"
  make_credentials
  start_etcd
  start_apiserver
  case "$rt" in
    berth)
      start_berthd
      endpoint="$WORK/berth.sock"
      daemon="$(awk '$2 == "berthd" {print $1}' <<<"$(printf '%s\n' "${STARTED_PIDS[@]}")")"
      helpers="$WORK/berth-state/shims/*/shim.pid"
      ;;
    containerd)
      mkdir -p "$WORK/net.d"
      write_bridge_network "$WORK/net.d/10-berth-k8s.conflist" berth-k8s "$CNI_BRIDGE" \
        "$CNI_SUBNET" "$WORK/cni-ipam"
      BERTH_REGISTRY="$REGISTRY" BERTH_CONTAINERD_CNI_CONF="$WORK/net.d/10-berth-k8s.conflist" \
        BERTH_CONTAINERD_STATE_TMPFS=1 BERTH_CONTAINERD_SANDBOX_IMAGE="$SANDBOX_IMAGE" \
        bash "$repo/scripts/containerd/start.sh" "$WORK/containerd" 2>"$WORK/logs/containerd-start.log" || {
        tail -n 20 "$WORK/logs/containerd-start.log" >&2
        return 1
      }
      endpoint="$WORK/containerd/containerd.sock"
      daemon="$(cat "$WORK/containerd/containerd.pid")"
      helpers="parent-of:$WORK/containerd/state/io.containerd.runtime.v2.task/k8s.io/*/init.pid"
      ;;
  esac
  crictl --runtime-endpoint "unix://$endpoint" --image-endpoint "unix://$endpoint" \
    --timeout 300s pull "$WORKLOAD_IMAGE" >/dev/null
  if [[ "$rt" == containerd ]]; then
    crictl --runtime-endpoint "unix://$endpoint" --image-endpoint "unix://$endpoint" \
      --timeout 300s pull "$SANDBOX_IMAGE" >/dev/null
  fi
  RUNTIME_ENDPOINT="unix://$endpoint" KUBELET_MAX_PODS="$(((pods > 110) ? pods : 110))" start_kubelet
  pods_yaml "$pods" >"$WORK/pods.yaml"
  # The previous level's teardown (its pods' network namespaces, writeback)
  # must not load this one's starts.
  settle

  log "$rt: creating $pods pods at once"
  "$PY" "$repo/scripts/bench/pod_start.py" "$RESULTS" "$rt" "$label" "$pods" "$RUNNING_TIMEOUT" \
    "${KUBECTL[@]}" -n "$NS" >"$WORK/logs/pod-start.log" 2>&1 &
  local watcher=$!
  sleep 3
  kubectl create -f "$WORK/pods.yaml" >/dev/null
  if ! wait "$watcher"; then
    cat "$WORK/logs/pod-start.log" >&2
    log "$rt: not all $pods pods ran within $RUNNING_TIMEOUT s"
    return 1
  fi
  # From kubelet itself (the API server's node proxy refuses loopback), as
  # the API server's client: the stage's CA signed that certificate.
  curl -fsSk --cert "$WORK/pki/kubelet-client.crt" --key "$WORK/pki/kubelet-client.key" \
    "https://127.0.0.1:$KUBELET_PORT/metrics" >"$WORK/kubelet-metrics.txt"
  "$PY" "$repo/scripts/bench/node_cost.py" sli "$RESULTS" "$rt" "$label" "$WORK/kubelet-metrics.txt" \
    "$WORK/logs/kubelet.log"

  if ((idle > 0)); then
    log "$rt: $pods pods idle for $idle s (after 30 s to settle)"
    sleep 30
    # shellcheck disable=SC2086 # the helper glob is expanded by node_cost.py
    "$PY" "$repo/scripts/bench/node_cost.py" idle "$RESULTS" "$rt" "$label" "$idle" \
      "$KUBELET_PID" "$daemon" $helpers
  fi
  log "$rt, $pods pods: done; tearing the cluster down"
  teardown
}

# Whichever runtime goes first meets the machine after the other's teardown
# (or after the build): the order alternates, as in scripts/bench.sh.
read -r -a order <<<"$RUNTIMES"
reversed=()
for ((i = ${#order[@]} - 1; i >= 0; i--)); do reversed+=("${order[i]}"); done
first=1
for pods in $LEVELS; do
  for ((rep = 1; rep <= REPS; rep++)); do
    runtimes=("${order[@]}")
    ((rep % 2 == 0)) && runtimes=("${reversed[@]}")
    for rt in "${runtimes[@]}"; do
      idle=0
      ((first)) && idle="$IDLE"
      log "$rt, $pods pods: repetition $rep/$REPS"
      level "$rt" "$pods" "$idle" "$rep"
    done
    first=0
  done
done

load="$(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" "$repo/scripts/bench/report.py" "$RESULTS" \
  --note "mode $MODE, pods $LEVELS, $REPS repetition(s), idle $IDLE s; commit $(git -C "$repo" rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M') UTC, load average $load at the end"
