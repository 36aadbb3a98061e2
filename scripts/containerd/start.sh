#!/usr/bin/env bash
# Starts containerd + runc at the versions pinned in
# scripts/containerd/install.sh (built from the Go module proxy when missing)
# as a comparison runtime for critest and benchmarks, self-contained in DIR:
#
#   scripts/containerd/start.sh DIR     (then: scripts/containerd/stop.sh DIR)
#
# CRI endpoint: unix://DIR/containerd.sock. Layout of DIR: config.toml,
# containerd.{pid,log,sock,sock.ttrpc}, root/, state/ (pod netns mounts and
# NRI's socket too), runc/ (runc state), opt/, nri/ (an empty plugin dir),
# certs.d/<host>/hosts.toml, cni/net.d/ and cni/ipam/.
# Idempotent: if containerd already runs from DIR, it only checks it answers.
#
# Configuration (config version 4; see /work/shared/BASELINE.md): sandbox
# image registry.k8s.io/pause:3.9 (pinned, pulled through the mirror),
# snapshotter overlayfs, runc (the pinned build) with SystemdCgroup = false
# (BERTH_CONTAINERD_SYSTEMD_CGROUP),
# restrict_oom_score_adj = true (root here lacks CAP_SYS_RESOURCE), stream
# server on 127.0.0.1, CNI plugins from /usr/lib/cni with a bridge + portmap
# network of its own, and registry.k8s.io, k8s.gcr.io, gcr.io,
# public.ecr.aws and docker.io mirrored to the local registry through
# certs.d/<host>/hosts.toml. Shim sockets still go to /run/containerd/s/
# (named by a hash of the socket path, so instances do not collide).
#
# Environment:
#   BERTH_REGISTRY               mirror registry host:port (default localhost:5000)
#   BERTH_CONTAINERD_SUBNET      pod subnet (default 10.87.0.0/16)
#   BERTH_CONTAINERD_BRIDGE      bridge name (default ctrd-cni0)
#   BERTH_CONTAINERD_LOG_LEVEL   containerd log level (default info)
#   BERTH_CONTAINERD_STATE_TMPFS 1: state/ and runc/ are tmpfs mounts, as
#                                /run/containerd is on a node (benchmarks; stop.sh
#                                unmounts them with the rest)
#   BERTH_CONTAINERD_CNI_CONF    a CNI .conflist to use instead of the generated
#                                one (copied into cni/net.d; benchmarks give both
#                                runtimes the same network config this way)
#   BERTH_CONTAINERD_SANDBOX_IMAGE  the pinned sandbox image (default
#                                registry.k8s.io/pause:3.9)
#   BERTH_CONTAINERD_SYSTEMD_CGROUP  1: runc's cgroups through systemd
#                                (SystemdCgroup = true), for a kubelet with the
#                                systemd cgroup driver; default 0 (cgroupfs)
#   BERTH_CONTAINERD_RUNTIME_HANDLERS  more runtime handlers, space-separated,
#                                each the pinned runc as `runc` is (e.g.
#                                test-handler, which Kubernetes' node e2e specs
#                                name in their RuntimeClass)
set -euo pipefail

# shellcheck source=scripts/containerd/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

[[ $# -eq 1 ]] || {
  echo "usage: $0 DIR" >&2
  exit 2
}
set_paths "$1"

REGISTRY="${BERTH_REGISTRY:-localhost:5000}"
SUBNET="${BERTH_CONTAINERD_SUBNET:-10.87.0.0/16}"
BRIDGE="${BERTH_CONTAINERD_BRIDGE:-ctrd-cni0}"
LOG_LEVEL="${BERTH_CONTAINERD_LOG_LEVEL:-info}"
SANDBOX_IMAGE="${BERTH_CONTAINERD_SANDBOX_IMAGE:-registry.k8s.io/pause:3.9}"
read -r -a EXTRA_HANDLERS <<<"${BERTH_CONTAINERD_RUNTIME_HANDLERS:-}"
case "${BERTH_CONTAINERD_SYSTEMD_CGROUP:-0}" in
  0) SYSTEMD_CGROUP=false ;;
  1) SYSTEMD_CGROUP=true ;;
  *)
    echo "containerd-start: BERTH_CONTAINERD_SYSTEMD_CGROUP must be 0 or 1" >&2
    exit 2
    ;;
esac
MIRRORED_HOSTS=(registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws docker.io)
CNI_BIN_DIR=/usr/lib/cni

# ---------------------------------------------------------------- packages

bash "$(dirname "${BASH_SOURCE[0]}")/install.sh" >/dev/null
missing=()
[[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/portmap" && -x "$CNI_BIN_DIR/host-local" ]] ||
  missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---------------------------------------------------------------- already running?

if pid="$(running_pid)"; then
  for ((i = 0; i < 100; i++)); do
    answers && break
    sleep 0.1
  done
  answers || die "containerd (pid $pid) runs from $DIR but does not answer on $SOCK; see $LOGFILE"
  log "already running (pid $pid), endpoint unix://$SOCK"
  exit 0
fi
rm -f "$PIDFILE"

if [[ -S "$SOCK" ]] && ctr_ --timeout 2s version >/dev/null 2>&1; then
  die "something else serves $SOCK without a pid recorded in $PIDFILE"
fi
if [[ -n "$(mounts_under "$DIR")" ]]; then
  log "warning: mounts left under $DIR by an earlier run (scripts/containerd/stop.sh $DIR cleans them)"
fi

curl -fsS -o /dev/null --max-time 2 "http://$REGISTRY/v2/" 2>/dev/null ||
  log "warning: registry http://$REGISTRY/v2/ does not answer (scripts/registry.sh start DIR); pulls will fail"

# ---------------------------------------------------------------- configuration

mkdir -p "$DIR/root" "$DIR/state" "$DIR/runc" "$DIR/opt" "$DIR/nri" "$DIR/certs.d" \
  "$DIR/cni/net.d" "$DIR/cni/ipam"
if [[ "${BERTH_CONTAINERD_STATE_TMPFS:-0}" == 1 ]]; then
  for d in "$DIR/state" "$DIR/runc"; do
    mountpoint -q "$d" || mount -t tmpfs -o mode=0711 tmpfs "$d"
  done
fi

for host in "${MIRRORED_HOSTS[@]}" "$REGISTRY"; do
  mkdir -p "$DIR/certs.d/$host"
  # Both the server and the host table: without the latter some containerd
  # releases reject the file and silently pull from the real registry.
  cat >"$DIR/certs.d/$host/hosts.toml" <<EOF
server = "http://$REGISTRY"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
done

if [[ -n "${BERTH_CONTAINERD_CNI_CONF:-}" ]]; then
  [[ -f "$BERTH_CONTAINERD_CNI_CONF" ]] || die "BERTH_CONTAINERD_CNI_CONF: no file $BERTH_CONTAINERD_CNI_CONF"
  rm -f "$DIR"/cni/net.d/*.conflist
  cp "$BERTH_CONTAINERD_CNI_CONF" "$DIR/cni/net.d/10-containerd-bridge.conflist"
else
  cat >"$DIR/cni/net.d/10-containerd-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "berth-containerd",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$DIR/cni/ipam"
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
fi

cat >"$CONFIG" <<EOF
version = 4
root = "$DIR/root"
state = "$DIR/state"
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
]

[debug]
  level = "$LOG_LEVEL"

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = "$SOCK"

  [plugins.'io.containerd.server.v1.ttrpc']
    address = "$SOCK.ttrpc"

  [plugins.'io.containerd.internal.v1.opt']
    path = "$DIR/opt"

  [plugins.'io.containerd.nri.v1.nri']
    socket_path = "$DIR/state/nri.sock"
    plugin_path = "$DIR/nri"
    plugin_config_path = "$DIR/nri"

  [plugins.'io.containerd.transfer.v1.local']
    config_path = "$DIR/certs.d"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$SANDBOX_IMAGE"

    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$DIR/certs.d"

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"

$(for handler in runc "${EXTRA_HANDLERS[@]}"; do
  cat <<HANDLER
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.$handler]
        runtime_type = "io.containerd.runc.v2"

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.$handler.options]
          BinaryName = "$CONTAINERD_BIN/runc"
          SystemdCgroup = $SYSTEMD_CGROUP
          Root = "$DIR/runc"

HANDLER
done)

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$DIR/cni/net.d"
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF

# ---------------------------------------------------------------- start

setsid "$CONTAINERD_BIN/containerd" --config "$CONFIG" </dev/null >>"$LOGFILE" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"

for ((i = 0; i < 300; i++)); do
  if answers; then
    log "started (pid $pid), endpoint unix://$SOCK, log $LOGFILE"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$PIDFILE"
    die "containerd exited at start; last lines of $LOGFILE:
$(tail -n 20 "$LOGFILE")"
  fi
  sleep 0.1
done
kill -TERM "$pid" 2>/dev/null || true
rm -f "$PIDFILE"
die "containerd (pid $pid) did not serve the CRI on $SOCK within 30 s (stopped it); see $LOGFILE"
