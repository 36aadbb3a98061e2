#!/usr/bin/env bash
# Stops the containerd started by scripts/containerd/start.sh DIR:
#
#   scripts/containerd/stop.sh DIR
#
# 1. while containerd runs (restarted first if it died with pods left): stops and removes every pod through the CRI (with
#    crictl, so CNI tears the pod networks down), then kills and deletes any
#    task left in any namespace (ctr);
# 2. stops containerd by the pid recorded in DIR/containerd.pid (SIGTERM, then
#    SIGKILL after 10 s);
# 3. removes containers still in DIR's runc state and ends the shims that
#    served this instance (identified by "-address DIR/containerd.sock" in
#    their command line, ended by pid);
# 4. unmounts everything below DIR (rootfs overlays, netns, shm), and deletes
#    the instance's CNI bridge if no pod uses it.
# Images and other state stay in DIR; remove DIR to start afresh.
# Idempotent.
set -euo pipefail

# shellcheck source=scripts/containerd/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

[[ $# -eq 1 ]] || {
  echo "usage: $0 DIR" >&2
  exit 2
}
[[ -d "$1" ]] || {
  log "no directory $1: nothing to stop"
  exit 0
}
set_paths "$1"

# ---------------------------------------------------------------- 1. workloads

# containerd died with pods left: start it again so that they are torn down
# through the CRI (CNI DEL for their networks and port mappings).
if ! running_pid >/dev/null && find_crictl >/dev/null &&
  [[ -n "$(ls -A "$DIR/root/io.containerd.grpc.v1.cri/sandboxes" 2>/dev/null)" ]]; then
  log "containerd not running but pods are left: restarting it to remove them"
  "$(dirname "${BASH_SOURCE[0]}")/start.sh" "$DIR" || log "warning: restart failed"
fi

if pid="$(running_pid)"; then
  if answers; then
    if crictl="$(find_crictl)"; then
      cri=("$crictl" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 30s)
      mapfile -t pods < <("${cri[@]}" pods -q 2>/dev/null || true)
      for p in "${pods[@]}"; do
        [[ -n "$p" ]] || continue
        "${cri[@]}" stopp "$p" >/dev/null 2>&1 || log "warning: stopp $p failed"
        "${cri[@]}" rmp -f "$p" >/dev/null 2>&1 || log "warning: rmp $p failed"
      done
      ((${#pods[@]} == 0)) || log "removed ${#pods[@]} pod(s)"
    else
      log "warning: crictl not found (BERTH_CRICTL): pods are not torn down through the CRI, CNI state may be left"
    fi
    mapfile -t namespaces < <(ctr_ --timeout 5s namespaces ls -q 2>/dev/null || true)
    for ns in "${namespaces[@]}"; do
      [[ -n "$ns" ]] || continue
      mapfile -t tasks < <(ctr_ -n "$ns" tasks ls -q 2>/dev/null || true)
      for t in "${tasks[@]}"; do
        [[ -n "$t" ]] || continue
        ctr_ -n "$ns" tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true
      done
      for t in "${tasks[@]}"; do
        [[ -n "$t" ]] || continue
        for ((i = 0; i < 50; i++)); do
          ctr_ -n "$ns" tasks delete "$t" >/dev/null 2>&1 && break
          sleep 0.1
        done
      done
    done
  fi

  # ------------------------------------------------------------ 2. containerd
  stop_pid "$pid" containerd
  log "stopped containerd (pid $pid)"
else
  log "containerd not running from $DIR"
fi
rm -f "$PIDFILE"

# ---------------------------------------------------------------- 3. leftovers

if command -v runc >/dev/null && [[ -d "$DIR/runc" ]]; then
  for root in "$DIR"/runc/*/; do
    [[ -d "$root" ]] || continue
    mapfile -t ids < <(runc --root "$root" list -q 2>/dev/null || true)
    for id in "${ids[@]}"; do
      [[ -n "$id" ]] || continue
      runc --root "$root" delete --force "$id" >/dev/null 2>&1 || log "warning: runc delete $id failed"
    done
  done
fi

shims=()
for p in /proc/[0-9]*; do
  cmd="$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")" || continue
  [[ "$cmd" == *containerd-shim* && "$cmd" == *"-address $SOCK "* ]] && shims+=("${p#/proc/}")
done
if ((${#shims[@]})); then
  kill -TERM "${shims[@]}" 2>/dev/null || true
  sleep 0.5
  for s in "${shims[@]}"; do
    kill -0 "$s" 2>/dev/null && kill -KILL "$s" 2>/dev/null || true
  done
  log "ended ${#shims[@]} leftover shim(s): ${shims[*]}"
fi

# ---------------------------------------------------------------- 4. mounts

for attempt in 1 2 3; do
  mapfile -t mps < <(mounts_under "$DIR")
  ((${#mps[@]})) || break
  for mp in "${mps[@]}"; do
    umount "$mp" 2>/dev/null || { ((attempt < 3)) || umount -l "$mp" 2>/dev/null || true; }
  done
done
mapfile -t mps < <(mounts_under "$DIR")
if ((${#mps[@]})); then
  die "mounts left under $DIR: ${mps[*]}"
fi
rm -f "$SOCK" "$SOCK.ttrpc"
log "no mounts left under $DIR"

# The CNI bridge of this instance (named in its conflist), once no pod uses it.
bridge="$(jq -r '.plugins[] | select(.type == "bridge") | .bridge // empty' \
  "$DIR"/cni/net.d/*.conflist 2>/dev/null | head -n1 || true)"
if [[ -n "$bridge" && -d "/sys/class/net/$bridge/bridge" ]]; then
  if [[ -z "$(ls -A "/sys/class/net/$bridge/brif" 2>/dev/null)" ]]; then
    if ip link delete "$bridge" 2>/dev/null; then log "deleted bridge $bridge"; fi
  else
    log "warning: bridge $bridge still has ports; left in place"
  fi
fi
exit 0
