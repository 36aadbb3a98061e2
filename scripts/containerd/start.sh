#!/usr/bin/env bash
# Starts Debian's containerd (1.6.20) + runc as a comparison runtime for
# critest and benchmarks, self-contained in DIR:
#
#   scripts/containerd/start.sh DIR     (then: scripts/containerd/stop.sh DIR)
#
# CRI endpoint: unix://DIR/containerd.sock. Layout of DIR: config.toml,
# containerd.{pid,log,sock}, root/, state/ (netns mounts too), runc/ (runc
# state), opt/, certs.d/<host>/hosts.toml, cni/net.d/ and cni/ipam/.
# Idempotent: if containerd already runs from DIR, it only checks it answers.
#
# Configuration (see /work/shared/CONFORMANCE.md, "containerd as the
# comparison"): sandbox_image registry.k8s.io/pause:3.9 (pulled through the
# mirror), snapshotter overlayfs, runc with SystemdCgroup = false,
# restrict_oom_score_adj = true, stream server on 127.0.0.1, CNI plugins from
# /usr/lib/cni with a bridge + portmap network of its own, and registry.k8s.io,
# k8s.gcr.io, gcr.io, public.ecr.aws and docker.io mirrored to the local
# registry through certs.d/<host>/hosts.toml.
#
# Environment:
#   BERTH_REGISTRY               mirror registry host:port (default localhost:5000)
#   BERTH_CONTAINERD_SUBNET      pod subnet (default 10.87.0.0/16)
#   BERTH_CONTAINERD_BRIDGE      bridge name (default ctrd-cni0)
#   BERTH_CONTAINERD_LOG_LEVEL   containerd log level (default info)
#   BERTH_CONTAINERD_CNI_CONF    a CNI .conflist to use instead of the generated
#                                one (copied into cni/net.d; benchmarks give both
#                                runtimes the same network config this way)
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
SANDBOX_IMAGE="registry.k8s.io/pause:3.9"
MIRRORED_HOSTS=(registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws docker.io)
CNI_BIN_DIR=/usr/lib/cni

# ---------------------------------------------------------------- packages

missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
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

mkdir -p "$DIR/root" "$DIR/state" "$DIR/runc" "$DIR/opt" "$DIR/certs.d" \
  "$DIR/cni/net.d" "$DIR/cni/ipam"

for host in "${MIRRORED_HOSTS[@]}" "$REGISTRY"; do
  mkdir -p "$DIR/certs.d/$host"
  # Both the server and the host table: without the latter containerd 1.6.20
  # rejects the file and silently pulls from the real registry.
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
version = 2
root = "$DIR/root"
state = "$DIR/state"
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  level = "$LOG_LEVEL"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$DIR/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$SANDBOX_IMAGE"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    systemd_cgroup = false

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$DIR/runc"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$DIR/cni/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$DIR/certs.d"
EOF

# ---------------------------------------------------------------- start

setsid containerd --config "$CONFIG" </dev/null >>"$LOGFILE" 2>&1 &
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
