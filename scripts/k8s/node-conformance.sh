#!/usr/bin/env bash
# Kubernetes' node e2e suite (test/e2e_node of k8s.io/kubernetes, focus
# [NodeConformance]) against a berthd of its own: e2e_node.test starts etcd,
# kube-apiserver and kubelet itself; ginkgo runs it in parallel; the images
# come from a local registry under their upstream names through berth's
# mirrors (scripts/images/node-e2e.sh). The JUnit report is printed one line
# per spec, compared with tests/node-conformance-expected-failures.txt, and
# summed up as `node conformance: N passed, N failed, N skipped`.
#
#   scripts/k8s/node-conformance.sh [BERTHD_BINARY]  (default $CARGO_TARGET_DIR/debug/berthd)
#   BERTH_NODE_CONFORMANCE_RUNTIME=containerd scripts/k8s/node-conformance.sh
#
# The second form runs the same suite, kubelet, images (same registry and
# mirrors) and CNI network against containerd + runc at the versions
# scripts/containerd/install.sh pins, configured by
# scripts/containerd/start.sh with registry.k8s.io mirrored to the local
# registry (a certs.d hosts.toml), the suite's pause image as its sandbox
# image, and the RuntimeClass handler `test-handler`: the baseline that tells
# berth's failures from the environment's. Its report is printed the same
# way, without the expected-failures list (that list is berth's).
#
# kubelet, e2e_node.test and berthd run in a mount namespace of their own
# shaped by scripts/k8s/lib/kubelet-ns.sh (the kernel sysctls kubelet checks
# masked, never changed on the host); kubelet gets `failCgroupV1: false` and
# an empty --system-cgroups (the suite's default, /system, would move every
# host process into it). The run leaves the host as it found it, as
# scripts/k8s/e2e.sh does: kubelet's cgroups, iptables chains, the CNI
# bridge and /var/lib/kubelet (when made here) are removed.
#
# Environment:
#   BERTH_NODE_CONFORMANCE_RUNTIME  berth (default) or containerd
#   BERTH_NODE_E2E_VERSION       Kubernetes version (default v1.37.2); built
#                                by scripts/k8s/install-node-e2e.sh
#   BERTH_NODE_CONFORMANCE_SUBSET=1  the CI subset (SUBSET_FOCUS below, a few
#                                minutes) instead of the whole focus
#   BERTH_NODE_CONFORMANCE_FOCUS a regexp replacing the focus (a partial run:
#                                unlisted expected failures are not reported)
#   BERTH_NODE_CONFORMANCE_SKIP  a regexp of specs to leave out besides the
#                                suite's own skips (a partial run)
#   BERTH_NODE_CONFORMANCE_NODES ginkgo's parallel nodes (default 8)
#   BERTH_NODE_CONFORMANCE_TIMEOUT  ginkgo's suite timeout (default 2h)
#   BERTH_NODE_CONFORMANCE_KEEP=1   keep the work dir (logs, report)
#   BERTH_NODE_CONFORMANCE_LOGS_TO  a directory the logs and the report are
#                                copied to at the end
#   BERTH_NODE_CONFORMANCE_REGISTRY_PORT  local registry port (default 5000)
#
# On a disposable node (the systemd + cgroup v2 guest of scripts/vm/, whose
# in-guest/node-conformance.sh sets these):
#   BERTH_NODE_CONFORMANCE_DISPOSABLE=1  kubelet runs as the suite starts it
#                                where systemd is PID 1 (a systemd-run unit, in
#                                the machine's own mount namespace, as on
#                                upstream's nodes) and may set the kernel
#                                sysctls it checks: nothing is masked
#   BERTH_NODE_CONFORMANCE_CGROUP_DRIVER  cgroupfs (default) or systemd, for
#                                kubelet and berthd alike
#   BERTH_NODE_CONFORMANCE_REGISTRY  host:port of a registry that already
#                                holds the stand-in images (none is started)
#   BERTH_NODE_E2E_BIN           a directory holding e2e_node.test, ginkgo
#                                and kubelet, used as it is (nothing built)
#   BERTH_NODE_CONFORMANCE_NODE_IP  kubelet's --node-ip (a node without a
#                                default route)
#   BERTH_NODE_CONFORMANCE_EXPECTED  the expected-failures list (default
#                                tests/node-conformance-expected-failures.txt)
#   BERTH_TEST_RUNC              the runc test-handler runs (default: the one
#                                scripts/containerd/install.sh pins)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
K8S_LIB="$repo/scripts/k8s/lib"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"
BERTHD="$(realpath "${1:-$CARGO_TARGET_DIR/debug/berthd}")"
RUNTIME="${BERTH_NODE_CONFORMANCE_RUNTIME:-berth}"
VERSION="${BERTH_NODE_E2E_VERSION:-v1.37.2}"
NODES="${BERTH_NODE_CONFORMANCE_NODES:-8}"
TIMEOUT="${BERTH_NODE_CONFORMANCE_TIMEOUT:-2h}"
REGISTRY_PORT="${BERTH_NODE_CONFORMANCE_REGISTRY_PORT:-5000}"
REGISTRY="localhost:$REGISTRY_PORT"
PRELOADED_REGISTRY="${BERTH_NODE_CONFORMANCE_REGISTRY:-}"
[[ -n "$PRELOADED_REGISTRY" ]] && REGISTRY="$PRELOADED_REGISTRY"
DISPOSABLE="${BERTH_NODE_CONFORMANCE_DISPOSABLE:-0}"
DRIVER="${BERTH_NODE_CONFORMANCE_CGROUP_DRIVER:-cgroupfs}"
case "$DRIVER" in
  cgroupfs | systemd) ;;
  *)
    echo "node-conformance: BERTH_NODE_CONFORMANCE_CGROUP_DRIVER must be cgroupfs or systemd, not $DRIVER" >&2
    exit 2
    ;;
esac
EXPECTED="${BERTH_NODE_CONFORMANCE_EXPECTED:-$repo/tests/node-conformance-expected-failures.txt}"
CNI_BRIDGE=berth-nc0
CNI_SUBNET=10.91.0.0/24
# The node is named after this host, as upstream's runner does; the API
# server reaches kubelet by that name.
NODE="$(hostname)"

FOCUS='\[NodeConformance\]'
# Not for a shared host, or needing features this suite leaves off.
SKIP='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]|\[Feature:.+\]'
# More to leave out (a shard of the focus: Go's regexps cannot negate).
[[ -n "${BERTH_NODE_CONFORMANCE_SKIP:-}" ]] && SKIP="$SKIP|$BERTH_NODE_CONFORMANCE_SKIP"
# The CI subset: specs of the kinds the node runs all day (container
# lifecycle, image updates, probes, hooks, env, volumes, security contexts,
# logs, hostnames), picked for their short run time; among them one each of
# what a stand-in image or a fix made pass (glibc-dns-testing, a SELinux
# level on a host without SELinux, curl in a hook, bash in a probe's pod).
SUBSET_FOCUS='(Container Runtime blackbox test on terminated container|Containers Lifecycle .* the regular container has its image updated should|Downward API volume should provide container.s (cpu|memory) limit|Variable Expansion should allow composing env vars|Secrets should be consumable via the environment|ConfigMap should be consumable via environment variable|Security Context When creating a (container with runAsUser|pod with readOnlyRootFilesystem)|Kubelet when scheduling a busybox command in a pod should print the output to logs|Probing container should be restarted with a exec "cat /tmp/health" liveness probe|InitContainer should invoke init containers on a RestartNever pod|Pods should get a host IP|Hostname of Pod a pod with subdomain field has FQDN, hostname is shortname|EmptyDir volumes should support \(root,0666,tmpfs\)|sig-node\] Container Lifecycle Hook .* should execute poststart http hook properly|sig-node\] Probing container should mark readiness on pods to false while pod is in progress of terminating when a pod has a readiness probe).*\[NodeConformance\]'
partial=""
if [[ "${BERTH_NODE_CONFORMANCE_SUBSET:-0}" == 1 ]]; then
  FOCUS="$SUBSET_FOCUS"
  partial=--partial
fi
if [[ -n "${BERTH_NODE_CONFORMANCE_FOCUS:-}" || -n "${BERTH_NODE_CONFORMANCE_SKIP:-}" ]]; then
  FOCUS="${BERTH_NODE_CONFORMANCE_FOCUS:-$FOCUS}"
  partial=--partial
fi

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
# shellcheck source=lib/registry.sh
source "$K8S_LIB/registry.sh"

log() { echo "node-conformance: $*" >&2; }

case "$RUNTIME" in
  berth)
    [[ -x "$BERTHD" ]] || {
      log "no berthd binary at $BERTHD"
      exit 1
    }
    ;;
  containerd)
    # Built from the Go module proxy when missing (a few minutes).
    bash "$repo/scripts/containerd/install.sh" >/dev/null
    ;;
  *)
    log "BERTH_NODE_CONFORMANCE_RUNTIME must be berth or containerd, not $RUNTIME"
    exit 2
    ;;
esac
[[ "$(id -u)" == 0 ]] || {
  log "must run as root"
  exit 1
}

# One kubelet at a time on a machine (kubepods cgroups at the root), and
# never beside critest: the Kubernetes stage's and critest's lock.
exec 9>/run/lock/berth-critest.lock
if ! flock -n 9; then
  log "another run holds /run/lock/berth-critest.lock; waiting"
  flock 9
fi
# The API server's and kubelet's ports (the suite's defaults) and the registry's.
ports=(6443 10248 10250 10255)
[[ -z "$PRELOADED_REGISTRY" ]] && ports+=("$REGISTRY_PORT")
for port in "${ports[@]}"; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    log "port $port is in use"
    exit 1
  fi
done
host_check_clean

if [[ -n "${BERTH_NODE_E2E_BIN:-}" ]]; then
  K8S_BIN="$BERTH_NODE_E2E_BIN"
  for b in e2e_node.test ginkgo kubelet; do
    [[ -x "$K8S_BIN/$b" ]] || {
      log "no $b in BERTH_NODE_E2E_BIN=$K8S_BIN"
      exit 1
    }
  done
else
  K8S_BIN="$(nice -n 10 bash "$repo/scripts/k8s/install-node-e2e.sh" "$VERSION")"
fi
WORK="$(mktemp -d /tmp/berth-node-conformance.XXXXXX)"
# Searchable by others: a hostUsers: false pod's rootfs is opened from its
# user namespace through berthd's state dir below.
chmod 0711 "$WORK"
mkdir -p "$WORK/logs" "$WORK/run" "$WORK/report" "$WORK/bin"
host_snapshot "$WORK"
# The top-level cgroups kubelet may make besides kubepods (the suite's
# kubeletCgroups and runtimeCgroups), removed at the end if new.
top_cgroups() { compgen -G '/sys/fs/cgroup/*/kubelet' || true; compgen -G '/sys/fs/cgroup/*/docker-daemon' || true; }
top_cgroups >"$WORK/cgroups.before"

cleanup() {
  local status=$?
  set +e
  if [[ -n "${ns_pid:-}" ]] && kill -0 "$ns_pid" 2>/dev/null; then
    # Its trap interrupts ginkgo, whose specs clean up (a grace period of
    # 30 s each), then stops the runtime: give it the time.
    kill -TERM "$ns_pid" 2>/dev/null
    local i
    for ((i = 0; i < 300; i++)); do
      kill -0 "$ns_pid" 2>/dev/null || break
      sleep 1
    done
    stop_pid "$ns_pid" "node e2e run"
  fi
  bash "$repo/scripts/registry.sh" stop "$WORK/registry" >/dev/null 2>&1
  remove_kubepods_cgroups || status=1
  local dir
  for dir in $(comm -13 "$WORK/cgroups.before" <(top_cgroups)); do
    find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null ||
      log "cannot remove cgroup $dir"
  done
  (
    flock -w 120 7 || log "removing iptables chains without the berth-network test lock"
    remove_new_iptables "$WORK"
  ) 7>/run/lock/berth-network-real-plugin-tests.lock
  if [[ -e "$WORK/made-var-lib-kubelet" ]]; then
    rmdir /var/lib/kubelet || log "/var/lib/kubelet is not empty; left in place"
  fi
  remove_new_link "$WORK" "$CNI_BRIDGE"
  if [[ -n "${BERTH_NODE_CONFORMANCE_LOGS_TO:-}" ]]; then
    mkdir -p "$BERTH_NODE_CONFORMANCE_LOGS_TO"
    cp -r "$WORK/logs" "$WORK/report" "$BERTH_NODE_CONFORMANCE_LOGS_TO/" ||
      log "cannot copy the logs to $BERTH_NODE_CONFORMANCE_LOGS_TO"
  fi
  finish_work_dir "$WORK" "${BERTH_NODE_CONFORMANCE_KEEP:-0}" || status=1
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
log "work dir $WORK; binaries from $K8S_BIN"
use_registry "$WORK" "$REGISTRY" "$PRELOADED_REGISTRY" "$REGISTRY_PORT" \
  bash "$repo/scripts/images/node-e2e.sh" "$REGISTRY" "$K8S_BIN"
log "images ready in $((SECONDS - start)) s"
# The stand-in images by the names the specs use (the runtime's mirrors send
# registry.k8s.io to the registry), for node-e2e-ns.sh to pull before the
# specs, as upstream's runs pull theirs (--prepull-images pulls the suite's
# own list, which names images no stand-in exists for: cadvisor, perl, the
# node-perf workloads): a spec's timeout then holds no pull.
refs="$(registry_refs "$REGISTRY")" || {
  log "cannot list the images of the registry at $REGISTRY"
  exit 1
}
grep -E '^(e2e-test-images/[^:]+|pause):' <<<"$refs" |
  sed 's|^|registry.k8s.io/|' >"$WORK/prepull.txt" || true
[[ -s "$WORK/prepull.txt" ]] || {
  log "the registry at $REGISTRY holds no stand-in images"
  exit 1
}

# One CNI network for either runtime.
mkdir -p "$WORK/net.d"
write_bridge_network "$WORK/net.d/10-berth-nc.conflist" berth-nc "$CNI_BRIDGE" \
  "$CNI_SUBNET" "$WORK/cni-ipam"
# The RuntimeClass handler the suite's specs name (upstream's CI configures
# it on every runtime: e2enode.PreconfiguredRuntimeClassHandler).
HANDLER=test-handler
if [[ "$RUNTIME" == berth ]]; then
  # berthd runs from a copy, with the helpers it execs from its directory.
  cp "$BERTHD" "$(dirname "$BERTHD")/berth-shim" "$(dirname "$BERTHD")/berth-pinns" "$WORK/bin/"
  write_berthd_config "$WORK/berthd.toml.tables" "$DRIVER" "$WORK/net.d" "$REGISTRY" \
    '[stream]\naddress = "127.0.0.1"'
  # As on containerd, the handler runs runc (the version
  # scripts/containerd/install.sh pins, built when missing).
  RUNC="${BERTH_TEST_RUNC:-$(bash "$repo/scripts/containerd/install.sh")/runc}"
  {
    cat "$WORK/berthd.toml.tables"
    printf '\n[runtime_handlers.%s]\nruntime_path = "%s"\n' "$HANDLER" "$RUNC"
  } >"$WORK/berthd.toml"
  SOCK="$WORK/berth.sock"
  PROCESS=berthd
  PIDFILE="$WORK/berthd.pid"
else
  # Read by scripts/containerd/start.sh, run by node-e2e-ns.sh: the
  # registry's mirrors, the network above, the pause image the suite's
  # kubelet asks for (scripts/images/node-e2e.sh pushes it), the handler.
  export BERTH_REGISTRY="$REGISTRY" BERTH_CONTAINERD_CNI_CONF="$WORK/net.d/10-berth-nc.conflist"
  export BERTH_CONTAINERD_SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2
  export BERTH_CONTAINERD_RUNTIME_HANDLERS="$HANDLER"
  # runc's cgroups through the driver kubelet uses, as berthd's are.
  if [[ "$DRIVER" == systemd ]]; then export BERTH_CONTAINERD_SYSTEMD_CGROUP=1; fi
  SOCK="$WORK/containerd/containerd.sock"
  PROCESS=containerd
  PIDFILE="$WORK/containerd/containerd.pid"
fi

# The suite's base kubelet configuration (test/e2e_node/jenkins/
# default-kubelet-config.yaml) with what this host needs: cgroup v1 allowed,
# and eviction thresholds for a shared, loaded machine.
cat >"$WORK/kubelet-base.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: $DRIVER
cgroupRoot: /
failCgroupV1: false
failSwapOn: false
podCIDR: "10.100.0.0/24"
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
EOF

# The mount point kubelet-ns.sh covers; removed at the end if made here.
if [[ "$DISPOSABLE" != 1 && ! -e /var/lib/kubelet ]]; then
  mkdir /var/lib/kubelet
  touch "$WORK/made-var-lib-kubelet"
fi

ginkgo_args=(
  "$K8S_BIN/ginkgo" --nodes="$NODES" --timeout="$TIMEOUT" --no-color
  --focus="$FOCUS" --skip="$SKIP"
  --output-dir="$WORK/report" --junit-report=junit.xml
  "$K8S_BIN/e2e_node.test" --
  --container-runtime-endpoint="unix://$SOCK"
  --image-service-endpoint="unix://$SOCK"
  --container-runtime-process-name="$PROCESS"
  --container-runtime-pid-file="$PIDFILE"
  --node-name="$NODE"
  --prepull-images=false
  --report-dir="$WORK/report"
  --kubelet-config-file="$WORK/kubelet-base.yaml"
  --kubelet-flags="--system-cgroups="
)
[[ -n "${BERTH_NODE_CONFORMANCE_NODE_IP:-}" ]] &&
  ginkgo_args+=(--kubelet-flags="--node-ip=$BERTH_NODE_CONFORMANCE_NODE_IP")

log "running e2e_node.test $VERSION against $RUNTIME: $NODES nodes, focus $FOCUS"
run_start=$SECONDS
# On a disposable node kubelet is a systemd unit in the machine's mount
# namespace (as upstream runs it), so the runtime shares that namespace too.
ns_shape=(unshare --mount --propagation unchanged bash "$K8S_LIB/kubelet-ns.sh" "$WORK")
[[ "$DISPOSABLE" == 1 ]] && ns_shape=()
set +e
BERTH_NODE_CONFORMANCE_DISPOSABLE="$DISPOSABLE" "${ns_shape[@]}" \
  bash "$K8S_LIB/node-e2e-ns.sh" "$WORK" "$RUNTIME" "${ginkgo_args[@]}" \
  >"$WORK/logs/ginkgo.log" 2>&1 &
ns_pid=$!
wait "$ns_pid"
ginkgo_status=$?
ns_pid=""
set -e
grep -a -m 1 "^node-conformance: pulled the" "$WORK/logs/ginkgo.log" >&2 || true
log "ginkgo exited with $ginkgo_status after $((SECONDS - run_start)) s"
if [[ ! -s "$WORK/report/junit.xml" ]]; then
  tail -n 60 "$WORK/logs/ginkgo.log" >&2
  log "no JUnit report"
  exit 1
fi

set +e
if [[ "$RUNTIME" == berth ]]; then
  python3 "$repo/scripts/node_conformance_results.py" "$WORK/report/junit.xml" "$EXPECTED" $partial
  results_status=$?
else
  # The baseline: every result printed, none held against a list.
  python3 "$repo/scripts/node_conformance_results.py" "$WORK/report/junit.xml" /dev/null --partial |
    grep -v '^UNEXPECTED FAILURE: '
  results_status=0
fi
set -e
log "stage took $((SECONDS - start)) s"
exit "$results_status"
