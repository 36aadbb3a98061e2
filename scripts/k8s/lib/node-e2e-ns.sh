#!/usr/bin/env bash
# Runs inside the mount namespace scripts/k8s/lib/kubelet-ns.sh shaped (the
# kernel sysctls kubelet checks masked, /var/log and /var/lib/kubelet
# directories of the run): the runtime under test, which pulls the images
# of WORK/prepull.txt first, then ginkgo on
# e2e_node.test, which starts etcd, kube-apiserver and kubelet (the one
# beside it) itself. The runtime shares the namespace so that the volumes
# kubelet mounts under /var/lib/kubelet are the ones it bind-mounts into
# containers; every mount made here goes with the namespace.
#
#   node-e2e-ns.sh WORK RUNTIME GINKGO [GINKGO ARGS...]
#
# RUNTIME is `berth` (WORK/bin/berthd with WORK/berthd.toml, serving
# WORK/berth.sock; its log WORK/logs/berthd.log, its pid WORK/berthd.pid) or
# `containerd` (scripts/containerd/start.sh WORK/containerd, configured by
# the BERTH_CONTAINERD_* variables the caller exports; stopped with
# scripts/containerd/stop.sh, which removes its pods). ginkgo runs in
# WORK/run.
set -euo pipefail
work="$1" runtime="$2"
shift 2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
# shellcheck source=../../lib/process.sh
source "$repo/scripts/lib/process.sh"
# shellcheck source=../../lib/mounts.sh
source "$repo/scripts/lib/mounts.sh"

log() { echo "node-conformance: $*" >&2; }

# e2e_node.test runs kubelet under systemd-run whenever it finds one on
# PATH. Without systemd as PID 1 that cannot work; with it, kubelet would be
# a unit in the machine's mount namespace, outside the one shaped here. So
# here, and only here, the binary is covered by a file that is not
# executable, so it is not found; except on a disposable node
# (BERTH_NODE_CONFORMANCE_DISPOSABLE=1, no namespace of our own), where
# kubelet runs as a unit, as on upstream's nodes.
disposable="${BERTH_NODE_CONFORMANCE_DISPOSABLE:-0}"
if [[ "$disposable" != 1 || "$(readlink /proc/1/exe 2>/dev/null)" != */systemd ]]; then
  for f in /usr/bin/systemd-run /bin/systemd-run; do
    [[ -e "$f" ]] || continue
    : >"$work/no-systemd-run"
    chmod 0644 "$work/no-systemd-run"
    mount --make-private "$(findmnt -n -o TARGET --target "$f")"
    mount --bind "$work/no-systemd-run" "$f"
  done
fi

start_berth() {
  # berthd's state dir on a tmpfs of its own, as /run is on a node.
  mkdir -p "$work/berth-state"
  mount -t tmpfs -o mode=0711 tmpfs "$work/berth-state"
  "$work/bin/berthd" --config "$work/berthd.toml" --listen "$work/berth.sock" \
    --root "$work/berth-root" --state "$work/berth-state" --log-level debug \
    >"$work/logs/berthd.log" 2>&1 &
  berthd_pid=$!
  echo "$berthd_pid" >"$work/berthd.pid"
  for _ in $(seq 200); do [[ -S "$work/berth.sock" ]] && break; sleep 0.1; done
  if [[ ! -S "$work/berth.sock" ]]; then
    tail -n 30 "$work/logs/berthd.log" >&2
    log "berthd did not create $work/berth.sock"
    kill "$berthd_pid" 2>/dev/null || true
    exit 1
  fi
}

# Pods and containers outlive the runtime by design: remove them through it.
stop_berth() {
  crictl --timeout 120s --runtime-endpoint "unix://$work/berth.sock" rmp --all --force >/dev/null 2>&1 ||
    log "crictl rmp --all failed; pods may be left in berthd's state"
  stop_pid "$berthd_pid" berthd
  # Without a namespace of our own the state tmpfs outlives this script.
  if [[ "$disposable" == 1 ]]; then
    unmount_tree "$work/berth-state"
  fi
}

# containerd's state and runc's on tmpfs mounts (as /run/containerd is on
# a node), made in this namespace and gone with it.
start_containerd() {
  BERTH_CONTAINERD_STATE_TMPFS=1 bash "$repo/scripts/containerd/start.sh" "$work/containerd" \
    2>"$work/logs/containerd-start.log" || {
    cat "$work/logs/containerd-start.log" >&2
    exit 1
  }
}

stop_containerd() {
  bash "$repo/scripts/containerd/stop.sh" "$work/containerd" >"$work/logs/containerd-stop.log" 2>&1 ||
    log "scripts/containerd/stop.sh failed; see $work/logs/containerd-stop.log"
}

# prepull SOCKET: pulls the images of WORK/prepull.txt through the runtime,
# four at a time.
prepull() {
  local count start=$SECONDS
  count="$(wc -l <"$work/prepull.txt")"
  xargs -P 4 -n 1 crictl --timeout 600s --image-endpoint "unix://$1" pull \
    <"$work/prepull.txt" >"$work/logs/prepull.log" 2>&1 || {
    tail -n 20 "$work/logs/prepull.log" >&2
    log "pulling the stand-in images through $runtime failed"
    "stop_$runtime"
    exit 1
  }
  log "pulled the $count stand-in images through $runtime in $((SECONDS - start)) s"
}

case "$runtime" in
  berth)
    start_berth
    prepull "$work/berth.sock"
    ;;
  containerd)
    start_containerd
    prepull "$work/containerd/containerd.sock"
    ;;
  *)
    log "unknown runtime $runtime"
    exit 2
    ;;
esac

# Stopped early (the caller's cleanup): the ginkgo CLI leaves an interrupt
# to its parallel processes, which a terminal signals as one process group;
# so ginkgo gets a group of its own here, and the whole group is
# interrupted, which stops the specs, the suite's kubelet and API server.
# The runtime still goes below.
ginkgo_pid=""
trap '[[ -n "$ginkgo_pid" ]] && kill -INT -- "-$ginkgo_pid" 2>/dev/null' TERM INT
(cd "$work/run" && exec setsid "$@") &
ginkgo_pid=$!
set +e
wait "$ginkgo_pid"
status=$?
# A wait cut short by the trap: wait for ginkgo to finish its interrupt.
while kill -0 "$ginkgo_pid" 2>/dev/null; do wait "$ginkgo_pid"; done
set -e

"stop_$runtime"
exit "$status"
