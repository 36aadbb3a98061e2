#!/usr/bin/env bash
# Benchmarks berth side by side with containerd + runc at the versions pinned
# in scripts/containerd/install.sh (2.4.2 and 1.5.2, built from the Go module
# proxy), and prints one markdown table: containerd, berth and
# berth/containerd for every metric, then the issue's targets met or missed.
#
#   scripts/bench.sh --quick     CI-sized, a few minutes
#   scripts/bench.sh             full mode (the tables in PERFORMANCE.md)
#   options: --keep (keep the work dir with logs and raw records)
#
# Both runtimes run at once, each with its own socket and dirs (their state
# dirs on tmpfs, as /run is on a node; roots on the disk), the same CNI
# config (bridge berth-bn0, 10.91.0.0/16, one host-local store) and the same
# images from one local registry on 127.0.0.1:5070; nothing collides with
# scripts/critest.sh (port 5000, berth-ct0, 10.89.0.0/16). Every workload is
# run against both, alternating which goes first from one repetition to the
# next, because other work on the machine moves absolute numbers:
#   1. critest -benchmark (pods, containers, images): mean/p50/p95 per RPC;
#   2. pod+container lifecycles, each RPC timed by one CRI client
#      (scripts/bench: crates/berth-bench), and the same loop as crictl
#      processes (runp, create, start, stop, rm, stopp, rmp);
#   3. concurrency: 50 pods with one container each, 8 clients at once: wall
#      time until all run, the pod-start latency kubelet sees per pod
#      (RunPodSandbox + CreateContainer + StartContainer) at p50/p95/p99,
#      errors;
#   4. memory (smaps_rollup RSS and PSS) of the daemon idle and with 10 and
#      50 pods, and of the per-pod helpers found through their pid files;
#   5. cold pull of a 6-layer, ~45 MiB image; warm ImageStatus and ListImages
#      with 100 images stored;
#   6. lifecycle latency with 0, 100 and 500 other pods running, in both
#      runtimes at once, then in berth alone with its 500 (containerd's
#      pods removed and containerd stopped); each level is measured once
#      the machine is quiet again (settle);
#   7. stats at scale: with 110 and 250 of those pods running in each
#      runtime, kubelet's stats RPCs (ListPodSandboxStats,
#      ListContainerStats, ListPodSandboxMetrics; ListContainers and
#      ListPodSandbox for reference) one after another, after one untimed
#      call of each (kubelet's connection is not new), each until its
#      calls took 60 s in all at most: p50/p99 per RPC; after them, each
#      stats answer's encoded size and how long the bench's client takes
#      to decode those bytes alone; before them, each daemon's cpu time
#      over 30 s without calls (20 in quick mode); at the end the same calls
#      in berth alone with its 250 pods (50 in quick mode; containerd
#      stopped, as in 6), 200 calls of each (20 in quick mode): berth's
#      take milliseconds, and a p99 of 50 a repetition was the second
#      slowest of the 150 pooled, one preempted call;
#   8. a stalled shim: with 110 of them running, one container's shim
#      SIGSTOPped (berth: the berth-shim of its pid file; containerd: the
#      pod's containerd-shim-runc-v2), then separately that container frozen
#      in its cgroup (v1 freezer or v2 cgroup.freeze), while every other
#      pod's ContainerStatus, ListContainers and ListContainerStats are
#      polled (60 rounds starting 300 ms apart on average, each gap drawn
#      at random so that they do not fall in step with a periodic stall of
#      the machine, and each poll spans about two of berthd's stats sampler
#      passes; 10 of each list a round; stats
#      calls until they took 30 s in a poll): p50/p99 against the same
#      polls without the stall, and how long the stalled container's own
#      ContainerStatus takes and what it says. Three repetitions of a poll
#      without the stall and one with it, in alternating order, pooled: a
#      p99 of one poll hung on whether another process held the cpus for a
#      few rounds. The shim is continued and the cgroup thawed right after
#      each stalled poll (and on exit).
#   9. cold pull of an image with one 1.5 GiB layer of incompressible
#      bytes (scripts/bench/bigimage.py, pushed once per run), directly
#      from the registry and through berth-throttle-proxy, which limits each
#      connection to 20 MiB/s as CDNs and object stores do; both runtimes
#      reach the proxy as the mirror of the made-up host bigpull.bench
#      (berth's [registry.mirrors], containerd's certs.d hosts.toml). The
#      image is removed after each pull, so the layer is on disk at most in
#      the registry and in one runtime at a time.
#  10. exec probes: with 8 pods running, ExecSync of `cat /etc/hostname`
#      (an exec probe's kind of command, its default 1 s timeout) in one
#      container at a time and in all 8 at once, as a node's probes fire:
#      p50/p99, and the execs that failed (an exec that takes a second
#      fails its probe).
# Quick mode uses fewer repetitions, fewer stored images and fewer other pods
# (stats with 20 and 50, the stall with 20, once); the table's header says
# which counts it used.
#
# It installs what is missing (scripts/install-deps.sh; containerd, ctr, the
# shim and runc by building them once into /usr/local/lib/berth-containerd/
# through scripts/containerd/install.sh, about 8 minutes on 2 cores;
# python3), builds berthd, berth-shim,
# berth-pinns and berth-bench in release mode, and on exit, failure or
# Ctrl-C stops everything it started by pid, removes its pods (CNI DEL),
# unmounts what is left under its work dir, and deletes its bridge.
#
# Environment: CARGO_TARGET_DIR (default ~/.cache/berth/target),
# BENCH_OUT (also write the table there), BENCH_REPS (repetitions),
# BENCH_WORKLOADS (the workloads to run, e.g. "6 7 8"; default all; 3 and 4
# run together, and 7 and 8 use 6's pods, which run even when 6 is left out),
# BENCH_SETTLE_SECONDS (the most a settle waits for a quiet machine, 120),
# BENCH_STATS_LEVELS (workload 7's pod counts, e.g. "250"),
# BENCH_STALL_REPS (workload 8's repetitions; 3, once in quick mode),
# BENCH_RUNTIMES ("berth" measures berth alone, e.g. for a profile: no
# containerd is started and the table has no ratios; default
# "containerd berth"),
# BENCH_PERF_DIR (a dir: berthd's cpu profile over each of its stats runs,
# `perf record` at 999 Hz, kept there as stats-LEVEL-REP.data with a flat
# report beside it, .txt; needs perf, Debian's linux-perf),
# BERTHD_LOG_LEVEL (berthd's log filter, default info; its log is
# berth/berthd.log in the work dir), BENCH_SLOW_MS (workload 8's client
# prints each polled call slower than that many ms, with its round and
# wall-clock time).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
MODE=full
KEEP=0
for arg in "$@"; do
  case "$arg" in
  --quick) MODE=quick ;;
  --keep) KEEP=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: $0 [--quick] [--keep]" >&2
    exit 2
    ;;
  esac
done

if [[ "$MODE" == quick ]]; then
  REPS="${BENCH_REPS:-2}"
  CRITEST_N=5 CRITEST_IMAGES_N=3
  LIFECYCLE_N=5 CRICTL_N=3
  CONC_PODS=50 CONC_CLIENTS=8 CONC_REPS=1
  MANY_IMAGES=30 LIST_N=10
  SCALE_LEVELS=(0 20 50) SCALE_N=3
  STATS_LEVELS=(20 50) STATS_N=20 STATS_ALONE_N=20 IDLE_SECONDS=20
  STALL_LEVEL=20 STALL_ROUNDS=20 STALL_EVERY_MS=500 STALL_REPS="${BENCH_STALL_REPS:-1}"
  EXEC_N=20
else
  REPS="${BENCH_REPS:-3}"
  CRITEST_N=20 CRITEST_IMAGES_N=10
  LIFECYCLE_N=10 CRICTL_N=5
  CONC_PODS=50 CONC_CLIENTS=8 CONC_REPS=3
  MANY_IMAGES=100 LIST_N=20
  SCALE_LEVELS=(0 100 500) SCALE_N=5
  STATS_LEVELS=(110 250) STATS_N=50 STATS_ALONE_N=200 IDLE_SECONDS=30
  STALL_LEVEL=110 STALL_ROUNDS=60 STALL_EVERY_MS=300 STALL_REPS="${BENCH_STALL_REPS:-3}"
  EXEC_N=50
fi
EXEC_PODS=8
# shellcheck disable=SC2206 # a list of numbers
[[ -z "${BENCH_STATS_LEVELS:-}" ]] || STATS_LEVELS=(${BENCH_STATS_LEVELS})
PERF_DIR="${BENCH_PERF_DIR:-}"
if [[ -n "$PERF_DIR" ]]; then
  command -v perf >/dev/null || { echo "bench: BENCH_PERF_DIR needs perf (Debian's linux-perf)" >&2; exit 1; }
  mkdir -p "$PERF_DIR"
fi
WORKLOADS=" ${BENCH_WORKLOADS:-1 2 3 4 5 6 7 8 9 10} "
# shellcheck disable=SC2206 # a list of names
RUNTIMES=(${BENCH_RUNTIMES:-containerd berth})
for rt in "${RUNTIMES[@]}"; do
  [[ "$rt" == containerd || "$rt" == berth ]] || { echo "bench: BENCH_RUNTIMES: unknown runtime $rt" >&2; exit 2; }
done
# has RUNTIME: whether RUNTIME is measured.
has() { [[ " ${RUNTIMES[*]} " == *" $1 "* ]]; }
has berth || { echo "bench: BENCH_RUNTIMES must hold berth" >&2; exit 2; }
# want N: whether workload N runs.
want() { [[ "$WORKLOADS" == *" $1 "* ]]; }
# in_list X LIST...: whether X is one of LIST.
in_list() {
  local x="$1" y
  shift
  for y in "$@"; do [[ "$x" == "$y" ]] && return 0; done
  return 1
}
MEM_LEVELS=(10 "$CONC_PODS")
BIGPULL_MIB=1536 BIGPULL_RATE_MIB=20

REGISTRY_ADDR=127.0.0.1:5070
REGISTRY=localhost:5070
BRIDGE=berth-bn0
SUBNET=10.91.0.0/16
WORKLOAD_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.29-2
SANDBOX_IMAGE=registry.k8s.io/pause:3.9
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/berth/target}"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$HOME/.cargo/bin${PATH:+:$PATH}"
PY=/usr/bin/python3

log() { echo "bench: $*" >&2; }
die() {
  echo "bench: error: $*" >&2
  exit 1
}

# One bench at a time: the runs share the registry port and the bridge.
exec 8>/run/lock/berth-bench.lock
flock -n 8 || die "another bench holds /run/lock/berth-bench.lock"

# shellcheck source=lib/process.sh
source "$repo/scripts/lib/process.sh"
# shellcheck source=lib/cni.sh
source "$repo/scripts/lib/cni.sh"
# shellcheck source=lib/berthd-config.sh
source "$repo/scripts/lib/berthd-config.sh"
# shellcheck source=lib/settle.sh
source "$repo/scripts/lib/settle.sh"

# ---------------------------------------------------------------- dependencies

log "installing what is missing"
bash "$repo/scripts/install-deps.sh" >&2
if [[ ! -x "$PY" ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 >/dev/null
fi
log "installing containerd and runc when missing (scripts/containerd/install.sh)"
CONTAINERD_BIN="$(bash "$repo/scripts/containerd/install.sh")"

log "building berthd, berth-shim, berth-pinns, berth-bench (release) in $CARGO_TARGET_DIR"
(cd "$repo" && cargo build --release --locked -p berthd -p berth-shim -p berth-pinns -p berth-bench) >&2
BIN="$CARGO_TARGET_DIR/release"
BERTHD="$BIN/berthd"
CLIENT="$BIN/berth-bench"

# ---------------------------------------------------------------- work dir and cleanup

work="$(mktemp -d /tmp/berth-bench.XXXXXX)"
RESULTS="$work/results.jsonl"
: >"$RESULTS"
declare -A SOCK=([berth]="$work/berth/berth.sock" [containerd]="$work/containerd/containerd.sock")
berthd_pid=""
# Under every cgroup hierarchy: the parents of workloads 6-8's pods.
CGROUP_ROOT="/berth-bench-$$"
proxy_pid=""

# mounts_under DIR: mount points at or below DIR, deepest first.
mounts_under() {
  awk -v d="$1" '{ mp = $5; gsub(/\\040/, " ", mp);
      if (mp == d || index(mp, d "/") == 1) print length(mp) "\t" mp }' \
    /proc/self/mountinfo | sort -rn | cut -f2-
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  set +e
  log "cleaning up"
  # Never leave a shim stopped or a container frozen.
  declare -F resume >/dev/null && resume
  if [[ -n "$berthd_pid" ]] && kill -0 "$berthd_pid" 2>/dev/null; then
    # Pods outlive berthd by design: remove them through it (CNI DEL) first.
    timeout 600 crictl --runtime-endpoint "unix://${SOCK[berth]}" --timeout 60s \
      rmp --all --force >/dev/null 2>&1
    stop_pid "$berthd_pid" berthd
  fi
  # Shims left by a berthd that died: by the pid files they wrote.
  local f pid
  for f in "$work"/berth/state/shims/*/shim.pid; do
    [[ -f "$f" ]] || continue
    pid="$(recorded_pid "$f" berth-shim)" && stop_pid "$pid" berth-shim
  done
  [[ -d "$work/containerd" ]] && bash "$repo/scripts/containerd/stop.sh" "$work/containerd" >&2
  [[ -z "$proxy_pid" ]] || stop_pid "$proxy_pid" berth-throttle-proxy
  BERTH_REGISTRY_ADDR="$REGISTRY_ADDR" bash "$repo/scripts/registry.sh" stop "$work/registry" >/dev/null 2>&1
  local mp attempt
  for attempt in 1 2 3; do
    while read -r mp; do
      [[ -n "$mp" ]] || continue
      umount "$mp" 2>/dev/null || { ((attempt < 3)) || umount -l "$mp" 2>/dev/null; }
    done < <(mounts_under "$work")
  done
  ip link del "$BRIDGE" 2>/dev/null
  # The pods' cgroup parents (made by the runtimes under CGROUP_ROOT),
  # empty once the pods are gone.
  local root
  for root in /sys/fs/cgroup"$CGROUP_ROOT" /sys/fs/cgroup/*"$CGROUP_ROOT"; do
    [[ -d "$root" ]] && find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  if [[ "$KEEP" == 1 ]]; then
    log "work dir kept: $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[[ ! -d "/sys/class/net/$BRIDGE" ]] || die "bridge $BRIDGE exists already (an earlier bench not cleaned up?)"

# ---------------------------------------------------------------- registry and images

log "registry on $REGISTRY_ADDR, images"
BERTH_REGISTRY_ADDR="$REGISTRY_ADDR" bash "$repo/scripts/registry.sh" start "$work/registry" >&2
BERTH_IMAGES_WORKDIR="$work/images" bash "$repo/scripts/images/build.sh" "$REGISTRY" >"$work/images.log" 2>&1 || {
  tail -n 40 "$work/images.log" >&2
  die "building the stand-in images failed"
}
if want 5; then
  bash "$repo/scripts/bench/multilayer.sh" "$work/images" "$REGISTRY" >>"$work/images.log" 2>&1 || {
    tail -n 20 "$work/images.log" >&2
    die "building the multi-layer image failed"
  }
  "$PY" "$repo/scripts/bench/many_images.py" "$REGISTRY" "$MANY_IMAGES" "$work/many.txt"
fi
rm -rf "$work/images"
MULTILAYER_IMAGE="$REGISTRY/bench/multilayer:1"

# The proxy of workload 9, and the mirror that sends bigpull.bench to it.
BIGPULL_MIRROR=""
if want 9; then
  log "the ${BIGPULL_MIB} MiB-layer image, and berth-throttle-proxy at $BIGPULL_RATE_MIB MiB/s per connection"
  "$PY" "$repo/scripts/bench/bigimage.py" "$REGISTRY_ADDR" "$BIGPULL_MIB"
  "$BIN/berth-throttle-proxy" --upstream "$REGISTRY_ADDR" --rate-mib "$BIGPULL_RATE_MIB" \
    </dev/null >"$work/proxy.addr" 2>"$work/proxy.log" &
  proxy_pid=$!
  for _ in $(seq 50); do [[ -s "$work/proxy.addr" ]] && break; sleep 0.1; done
  PROXY_ADDR="$(head -n 1 "$work/proxy.addr")"
  [[ -n "$PROXY_ADDR" ]] || die "berth-throttle-proxy did not start: $(cat "$work/proxy.log")"
  BIGPULL_MIRROR="[registry.mirrors.\"bigpull.bench\"]\nendpoints = [\"http://$PROXY_ADDR\"]\nfallback_to_upstream = false"
fi

# ---------------------------------------------------------------- the shared CNI network

mkdir -p "$work/cni/net.d" "$work/cni/ipam"
CNI_CONF="$work/cni/net.d/10-berth-bench.conflist"
write_bridge_network "$CNI_CONF" berth-bench "$BRIDGE" "$SUBNET" "$work/cni/ipam"

# ---------------------------------------------------------------- the runtimes

# Runtime state on tmpfs, for both: the default state dirs (/run/berth,
# /run/containerd) are tmpfs on a node, and this machine's /run is not.
log "starting berthd"
mkdir -p "$work/berth/state"
mount -t tmpfs -o mode=0711 tmpfs "$work/berth/state"
write_berthd_config "$work/berth/runtime-config.toml" cgroupfs "$work/cni/net.d" "$REGISTRY" "$BIGPULL_MIRROR"
"$BERTHD" --config "$work/berth/runtime-config.toml" --listen "${SOCK[berth]}" \
  --root "$work/berth/root" --state "$work/berth/state" --log-level "${BERTHD_LOG_LEVEL:-info}" \
  </dev/null >"$work/berth/berthd.log" 2>&1 &
berthd_pid=$!
for _ in $(seq 100); do [[ -S "${SOCK[berth]}" ]] && break; sleep 0.1; done
[[ -S "${SOCK[berth]}" ]] || {
  tail -n 20 "$work/berth/berthd.log" >&2
  die "berthd did not start"
}

containerd_pid=""
if has containerd; then
  log "starting containerd"
  BERTH_REGISTRY="$REGISTRY" BERTH_CONTAINERD_CNI_CONF="$CNI_CONF" BERTH_CONTAINERD_STATE_TMPFS=1 \
    bash "$repo/scripts/containerd/start.sh" "$work/containerd" >&2
  containerd_pid="$(cat "$work/containerd/containerd.pid")"
fi
if want 9 && has containerd; then
  # containerd reads its hosts directory at every pull.
  mkdir -p "$work/containerd/certs.d/bigpull.bench"
  cat >"$work/containerd/certs.d/bigpull.bench/hosts.toml" <<EOF
server = "http://$PROXY_ADDR"

[host."http://$PROXY_ADDR"]
  capabilities = ["pull", "resolve"]
EOF
fi
declare -A DAEMON=([berth]="$berthd_pid" [containerd]="$containerd_pid")
declare -A HELPERS=(
  [berth]="$work/berth/state/shims/*/shim.pid"
  [containerd]="parent-of:$work/containerd/state/io.containerd.runtime.v2.task/k8s.io/*/init.pid"
)

# client RUNTIME ARGS...: the CRI client against RUNTIME, recording to RESULTS.
client() {
  local rt="$1"
  shift
  "$CLIENT" --socket "${SOCK[$rt]}" --runtime "$rt" --out "$RESULTS" "$@"
}
# pod_args RUNTIME TAG: the pods of workloads 6-8 (tag bg) get a cgroup
# parent each under CGROUP_ROOT, as kubelet gives every pod (containerd's
# pod stats fail without one).
pod_args() {
  echo --image "$WORKLOAD_IMAGE" --log-root "$work/logs/$1" --tag "$2"
  [[ "$2" != bg ]] || echo --cgroup-root "$CGROUP_ROOT/$1"
}

# order REP: the runtimes in the order repetition REP runs them.
order() {
  local rt
  if (($1 % 2 == 0)); then set -- containerd berth; else set -- berth containerd; fi
  for rt in "$@"; do ! has "$rt" || echo "$rt"; done
}

log "pre-pulling the workload image (and containerd's sandbox image)"
echo "$WORKLOAD_IMAGE" >"$work/workload-images.txt"
client berth pull-all --file "$work/workload-images.txt"
echo "$SANDBOX_IMAGE" >>"$work/workload-images.txt"
! has containerd || client containerd pull-all --file "$work/workload-images.txt"

memory() { # RUNTIME LABEL PODS
  # shellcheck disable=SC2086 # the helper glob is expanded by memory.py
  "$PY" "$repo/scripts/bench/memory.py" "$RESULTS" "$1" "$2" "$3" "${DAEMON[$1]}" "${HELPERS[$1]}"
}
for rt in "${RUNTIMES[@]}"; do memory "$rt" idle 0; done

# ---------------------------------------------------------------- 1. critest -benchmark

cat >"$work/critest-params.yaml" <<EOF
containersNumber: $CRITEST_N
containersNumberParallel: 1
podsNumber: $CRITEST_N
podsNumberParallel: 1
imagesNumber: $CRITEST_IMAGES_N
imagesNumberParallel: 1
EOF
if want 1; then
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      log "critest -benchmark, $rt, repetition $((rep + 1))/$REPS"
      d="$work/critest/$rt-$rep"
      mkdir -p "$d"
      (cd "$d" && timeout 20m critest -benchmark \
        --runtime-endpoint "unix://${SOCK[$rt]}" --image-endpoint "unix://${SOCK[$rt]}" \
        --benchmarking-params-file "$work/critest-params.yaml" \
        --benchmarking-output-dir "$d" --ginkgo.no-color >"$d/critest.log" 2>&1) || {
        tail -n 30 "$d/critest.log" >&2
        die "critest -benchmark against $rt failed (log: $d/critest.log)"
      }
      "$PY" "$repo/scripts/bench/critest_results.py" "$RESULTS" "$rt" "$d"
    done
  done
fi

# ---------------------------------------------------------------- 2. lifecycles

cat >"$work/crictl-pod.json" <<EOF
{
  "metadata": { "name": "crictl-loop", "namespace": "berth-bench", "uid": "crictl-loop-uid", "attempt": 0 },
  "hostname": "crictl-loop",
  "log_directory": "$work/logs/crictl",
  "labels": { "berth-bench": "crictl" },
  "linux": {}
}
EOF
cat >"$work/crictl-container.json" <<EOF
{
  "metadata": { "name": "work" },
  "image": { "image": "$WORKLOAD_IMAGE" },
  "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
  "log_path": "work.log",
  "labels": { "berth-bench": "crictl" },
  "linux": {}
}
EOF
if want 2; then
  mkdir -p "$work/logs/crictl"
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      log "lifecycles, $rt, repetition $((rep + 1))/$REPS"
      # shellcheck disable=SC2046
      client "$rt" lifecycle $(pod_args "$rt" life) --n "$LIFECYCLE_N" --metric lifecycle
      "$PY" "$repo/scripts/bench/crictl_loop.py" "$RESULTS" "$rt" "${SOCK[$rt]}" "$CRICTL_N" \
        "$work/crictl-pod.json" "$work/crictl-container.json"
    done
  done
fi

# ---------------------------------------------------------------- 3+4. concurrency and memory

if want 3 || want 4; then
  for rt in "${RUNTIMES[@]}"; do
    log "memory with ${MEM_LEVELS[0]} pods, $rt"
    # shellcheck disable=SC2046
    client "$rt" up $(pod_args "$rt" mem) --pods "${MEM_LEVELS[0]}" --clients "$CONC_CLIENTS"
    memory "$rt" "${MEM_LEVELS[0]} pods" "${MEM_LEVELS[0]}"
    client "$rt" down --tag mem --clients "$CONC_CLIENTS"
  done
  for ((rep = 0; rep < CONC_REPS; rep++)); do
    for rt in $(order "$rep"); do
      log "concurrency: $CONC_PODS pods, $CONC_CLIENTS clients, $rt, repetition $((rep + 1))/$CONC_REPS"
      # shellcheck disable=SC2046
      client "$rt" up $(pod_args "$rt" conc) --pods "$CONC_PODS" --clients "$CONC_CLIENTS" --metric concurrency
      ((rep > 0)) || memory "$rt" "$CONC_PODS pods" "$CONC_PODS"
      client "$rt" down --tag conc --clients "$CONC_CLIENTS"
    done
  done
fi

# ---------------------------------------------------------------- 10. exec probes

# Before 6, which stops containerd.
if want 10; then
  for rt in "${RUNTIMES[@]}"; do
    # shellcheck disable=SC2046
    client "$rt" up $(pod_args "$rt" exec) --pods "$EXEC_PODS" --clients "$CONC_CLIENTS"
  done
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      for at_once in 1 "$EXEC_PODS"; do
        log "exec probes, $at_once at once, $rt, repetition $((rep + 1))/$REPS"
        client "$rt" exec --tag exec --n "$EXEC_N" --at-once "$at_once"
      done
    done
  done
  for rt in "${RUNTIMES[@]}"; do client "$rt" down --tag exec --clients "$CONC_CLIENTS"; done
fi

# ---------------------------------------------------------------- 5. images

if want 5; then
  echo "$MULTILAYER_IMAGE" >"$work/multilayer.txt"
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      log "cold pull of $MULTILAYER_IMAGE, $rt, repetition $((rep + 1))/$REPS"
      client "$rt" cold-pull --image "$MULTILAYER_IMAGE" --n 1
    done
  done
  for rt in "${RUNTIMES[@]}"; do
    log "pulling $MANY_IMAGES small images into $rt"
    client "$rt" pull-all --file "$work/many.txt" --clients 4
  done
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      log "warm ImageStatus/ListImages, $rt, repetition $((rep + 1))/$REPS"
      client "$rt" warm --file "$work/many.txt" --n "$LIST_N"
    done
  done
fi

# ---------------------------------------------------------------- 9. one large layer

# Before 6, which stops containerd. Each pull starts and ends with the
# image removed: 1.5 GiB on disk per runtime, one runtime at a time.
if want 9; then
  for ((rep = 0; rep < REPS; rep++)); do
    for rt in $(order "$rep"); do
      for via in directly "through the proxy"; do
        if [[ "$via" == directly ]]; then image="$REGISTRY/bench/big:1"; else image=bigpull.bench/bench/big:1; fi
        log "cold pull of the ${BIGPULL_MIB} MiB layer $via, $rt, repetition $((rep + 1))/$REPS"
        sync
        client "$rt" cold-pull --image "$image" --n 1 --metric "bigpull/PullImage $via" --remove-after
      done
    done
  done
fi

# ---------------------------------------------------------------- 6-8. scaling, stats, a stalled shim

# The shim stopped or the cgroup frozen by workload 8, to undo at once
# after it and on any exit.
STOPPED_PID="" FROZEN_FILE="" THAW_VALUE=""
resume() {
  if [[ -n "$STOPPED_PID" ]]; then
    kill -CONT "$STOPPED_PID" 2>/dev/null || true
    STOPPED_PID=""
  fi
  if [[ -n "$FROZEN_FILE" ]]; then
    echo "$THAW_VALUE" >"$FROZEN_FILE" 2>/dev/null || true
    FROZEN_FILE=""
  fi
}

# freezer_of PID: the file that freezes PID's cgroup, its freeze and thaw
# values (cgroup v1 freezer, else v2 cgroup.freeze).
freezer_of() {
  local line
  if line="$(grep -m1 -E '^[0-9]+:([^:]*,)?freezer(,[^:]*)?:' "/proc/$1/cgroup")"; then
    echo "/sys/fs/cgroup/freezer${line#*:*:}/freezer.state FROZEN THAWED"
  elif line="$(grep -m1 '^0::' "/proc/$1/cgroup")"; then
    echo "/sys/fs/cgroup${line#0::}/cgroup.freeze 1 0"
  else
    return 1
  fi
}

# shim_of RUNTIME PID SHIM_DIR: the pid of the shim serving the container
# whose process is PID (berth: from its pid file; containerd: the pod's
# shim, the process's parent).
shim_of() {
  local pid comm
  if [[ "$1" == berth ]]; then
    pid="$(recorded_pid "$3/shim.pid" berth-shim)" || return 1
  else
    pid="$(awk '{ print $4 }' "/proc/$2/stat")"
    comm="$(cat "/proc/$pid/comm")"
    [[ "$comm" == containerd-shim* ]] || return 1
  fi
  echo "$pid"
}

# stall RUNTIME KIND REP: one repetition of workload 8 for one runtime, KIND
# shim or freeze: a poll without the stall and one with it, in that order
# in even repetitions and the other way round in odd ones, so that neither
# phase is always the later one.
stall() {
  local rt="$1" kind="$2" rep="$3" id pid dir phase
  IFS=$'\t' read -r id pid dir < <(client "$rt" pick --tag bg) || die "$rt: no container to stall"
  [[ -n "$id" && "$pid" -gt 0 ]] || die "$rt: no running container to stall"
  for phase in $( ((rep % 2 == 0)) && echo none stalled || echo stalled none); do
    if [[ "$phase" == none ]]; then
      log "stall ($kind), $rt, repetition $((rep + 1))/$STALL_REPS: polling the other pods, container $id running"
      poll_others "$rt" "$id" "stall/$kind/none"
    else
      stalled_poll "$rt" "$kind" "$rep" "$id" "$pid" "$dir"
    fi
  done
}

# poll_others RUNTIME ID METRIC [--stalled]: one poll of workload 8, every
# bg pod but container ID, recorded under METRIC.
poll_others() {
  local rt="$1" id="$2" metric="$3"
  shift 3
  client "$rt" poll --tag bg --skip "$id" --rounds "$STALL_ROUNDS" --every-ms "$STALL_EVERY_MS" --metric "$metric" "$@"
}

# stalled_poll RUNTIME KIND REP ID PID SHIM_DIR: polls the other pods with
# container ID's shim stopped or its cgroup frozen, then resumes it.
stalled_poll() {
  local rt="$1" kind="$2" rep="$3" id="$4" pid="$5" dir="$6" file freeze thaw target status=0
  if [[ "$kind" == shim ]]; then
    target="$(shim_of "$rt" "$pid" "$dir")" || die "$rt: no shim found for container $id"
    log "stall ($kind), $rt, repetition $((rep + 1))/$STALL_REPS: SIGSTOP to shim $target, polling the other pods"
    STOPPED_PID="$target"
    kill -STOP "$target"
  else
    read -r file freeze thaw < <(freezer_of "$pid") || die "$rt: no freezer for pid $pid"
    log "stall ($kind), $rt, repetition $((rep + 1))/$STALL_REPS: freezing $file, polling the other pods"
    FROZEN_FILE="$file" THAW_VALUE="$thaw"
    echo "$freeze" >"$file"
  fi
  poll_others "$rt" "$id" "stall/$kind/stalled" --stalled || status=$?
  resume
  ((status == 0)) || die "polling with a stalled $kind in $rt failed"
}

# idle_cpu LEVEL: each daemon's cpu time over IDLE_SECONDS with LEVEL pods
# running and no calls (berthd's stats sampler runs meanwhile; its period is
# 10 s by default, so the window holds a few of its passes), in ms per s.
idle_cpu() {
  local rt hz
  hz="$(getconf CLK_TCK)"
  declare -A before
  for rt in "${RUNTIMES[@]}"; do
    before[$rt]="$(awk '{ print $14 + $15 }' "/proc/${DAEMON[$rt]}/stat")"
  done
  sleep "$IDLE_SECONDS"
  for rt in "${RUNTIMES[@]}"; do
    awk -v rt="$rt" -v level="$1" -v before="${before[$rt]}" -v hz="$hz" -v secs="$IDLE_SECONDS" \
      '{ printf "{\"runtime\":\"%s\",\"metric\":\"stats/%s/daemon cpu, idle (ms per s)\",\"unit\":\"ms\",\"samples\":[%.3f]}\n",
           rt, level, ($14 + $15 - before) * 1000 / hz / secs }' "/proc/${DAEMON[$rt]}/stat" >>"$RESULTS"
  done
}

# profiled BASE CMD...: runs CMD with berthd's cpu profile recorded meanwhile
# into BASE.data, and its flat report (symbols over 0.5%) into BASE.txt.
profiled() {
  local base="$1" perf_pid status=0
  shift
  perf record -q -F 999 -g -p "$berthd_pid" -o "$base.data" >/dev/null 2>&1 &
  perf_pid=$!
  sleep 1 # perf attaches before the calls begin
  "$@" || status=$?
  kill -INT "$perf_pid" 2>/dev/null
  # perf ends on the INT with status 130, which is no failure here.
  wait "$perf_pid" 2>/dev/null || true
  perf report -i "$base.data" --stdio --no-children --sort symbol --percent-limit 0.5 \
    >"$base.txt" 2>/dev/null || log "perf report of $base.data failed"
  return "$status"
}

# The levels of other pods: those of workload 6, and those 7 and 8 want.
LEVELS=()
want 6 && LEVELS+=("${SCALE_LEVELS[@]}")
want 7 && LEVELS+=("${STATS_LEVELS[@]}")
want 8 && LEVELS+=("$STALL_LEVEL")
mapfile -t LEVELS < <(printf '%s\n' "${LEVELS[@]}" | sort -nu)
running=0
for level in "${LEVELS[@]}"; do
  if ((level > running)); then
    for rt in "${RUNTIMES[@]}"; do
      log "scaling: starting $((level - running)) more pods in $rt (to $level)"
      # shellcheck disable=SC2046
      client "$rt" up $(pod_args "$rt" bg) --pods "$((level - running))" --clients "$CONC_CLIENTS"
    done
    running=$level
  fi
  settle
  if want 6 && in_list "$level" "${SCALE_LEVELS[@]}"; then
    for ((rep = 0; rep < REPS; rep++)); do
      for rt in $(order "$rep"); do
        log "scaling: lifecycles with $level other pods, $rt, repetition $((rep + 1))/$REPS"
        # shellcheck disable=SC2046
        client "$rt" lifecycle $(pod_args "$rt" scale) --n "$SCALE_N" --metric "scale/$level"
      done
    done
  fi
  if want 7 && in_list "$level" "${STATS_LEVELS[@]}"; then
    log "stats with $level pods: each daemon's cpu over ${IDLE_SECONDS}s without calls"
    idle_cpu "$level"
    for ((rep = 0; rep < REPS; rep++)); do
      for rt in $(order "$rep"); do
        log "stats with $level pods, $rt, repetition $((rep + 1))/$REPS"
        if [[ "$rt" == berth && -n "$PERF_DIR" ]]; then
          profiled "$PERF_DIR/stats-$level-$((rep + 1))" client "$rt" stats --n "$STATS_N" --metric "stats/$level"
        else
          client "$rt" stats --n "$STATS_N" --metric "stats/$level"
        fi
      done
    done
  fi
  if want 8 && ((level == STALL_LEVEL)); then
    for kind in shim freeze; do
      for ((rep = 0; rep < STALL_REPS; rep++)); do
        for rt in $(order "$rep"); do stall "$rt" "$kind" "$rep"; done
      done
    done
  fi
done
if (want 6 || want 7) && has containerd; then
  # The same top levels with berth alone: containerd's pods removed, so the
  # host holds only berth's (the scaling and stats targets are for a node
  # running one runtime; above, both runtimes' pods load the host at once).
  log "removing the $running background pods of containerd, then stopping it"
  client containerd down --tag bg --clients "$CONC_CLIENTS"
  # A node running one runtime: nothing of containerd's left running, nor
  # its teardown's aftermath.
  bash "$repo/scripts/containerd/stop.sh" "$work/containerd" >&2
  settle
  if want 6 && ((running > 0)); then
    for ((rep = 0; rep < REPS; rep++)); do
      log "scaling: lifecycles with $running other pods, berth alone, repetition $((rep + 1))/$REPS"
      # shellcheck disable=SC2046
      client berth lifecycle $(pod_args berth scale) --n "$SCALE_N" --metric "alone/$running"
    done
  fi
  if want 7; then
    top="$(printf '%s\n' "${STATS_LEVELS[@]}" | sort -n | tail -1)"
    if ((running > top)); then
      log "removing $((running - top)) background pods of berth (to $top)"
      client berth down --tag bg --clients "$CONC_CLIENTS" --leave "$top"
      running=$top
      settle
    fi
    for ((rep = 0; rep < REPS; rep++)); do
      log "stats with $running pods, berth alone, repetition $((rep + 1))/$REPS"
      client berth stats --n "$STATS_ALONE_N" --metric "stats-alone/$running"
    done
  fi
elif has containerd; then
  log "removing the $running background pods of containerd"
  client containerd down --tag bg --clients "$CONC_CLIENTS"
fi
log "removing the $running background pods of berth"
client berth down --tag bg --clients "$CONC_CLIENTS"

# ---------------------------------------------------------------- the table

notes=(
  "Mode: $MODE ($(date -u +%Y-%m-%d)), $REPS alternating repetitions; containerd $("$CONTAINERD_BIN/containerd" --version | awk '{print $3}') + runc $("$CONTAINERD_BIN/runc" --version | awk 'NR==1 {print $3}'), berth $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "(not a git checkout)"); $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end."
  "Counts: critest $CRITEST_N pods/containers and $CRITEST_IMAGES_N images per run; lifecycle $LIFECYCLE_N and crictl loop $CRICTL_N per repetition; concurrency $CONC_PODS pods, $CONC_CLIENTS clients, $CONC_REPS repetition(s); memory with ${MEM_LEVELS[*]} pods; $MANY_IMAGES stored images for the warm image calls; scaling with ${SCALE_LEVELS[*]} other pods, $SCALE_N lifecycles per repetition; stats with ${STATS_LEVELS[*]} pods, $STATS_N calls of each RPC per repetition ($STATS_ALONE_N in berth alone); stalled shim/frozen container with $STALL_LEVEL pods, $STALL_REPS repetition(s) of $STALL_ROUNDS polling rounds ${STALL_EVERY_MS} ms apart without and with the stall; one ${BIGPULL_MIB} MiB layer, proxy at $BIGPULL_RATE_MIB MiB/s per connection; exec probes $EXEC_N rounds in 1 and in $EXEC_PODS containers at once. Workloads run: ${BENCH_WORKLOADS:-all}."
)
"$PY" "$repo/scripts/bench/report.py" "$RESULTS" "${notes[@]/#/--note=}" | tee "$work/table.md"
[[ -z "${BENCH_OUT:-}" ]] || cp "$work/table.md" "$BENCH_OUT"
