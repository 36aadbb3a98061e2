#!/usr/bin/env bash
# Runs kubelet in the mount namespace `unshare --mount --propagation
# unchanged` gave it, shaped so kubelet leaves the host's sysctls and /var/log
# alone:
#   - the /proc/sys files kubelet checks at start-up (and would rewrite, or
#     refuse to start with protectKernelDefaults) are bind-mounted over by
#     files holding the values it expects;
#   - /var/log is a directory of the stage, so the /var/log/containers
#     symlinks kubelet always makes stay out of the host;
#   - /var/lib/kubelet (an empty mount point, see start_kubelet) is one too,
#     for the device-plugin socket kubelet makes there whatever its root dir.
# The kubelet root dir is a shared mount made before unshare, so the volumes
# kubelet mounts there still reach berthd in the host's namespace.
#
#   kubelet-ns.sh WORK_DIR KUBELET [ARGS...]     (execs kubelet)
set -euo pipefail
work="$1"
shift

# Mounts made below must never propagate back to the host, whatever the
# host's propagation is: make private the mounts they are made on (not
# recursively, so the kubelet root dir's shared mount keeps propagating).
mount --make-private /proc
mount --make-private "$(findmnt -n -o TARGET --target /var/log)"
mount --make-private "$(findmnt -n -o TARGET --target /var/lib/kubelet)"

# Values from setupKernelTunables (k8s.io/component-helpers node/util/sysctl).
mkdir -p "$work/sysctl"
while read -r key value; do
  printf '%s\n' "$value" >"$work/sysctl/${key//\//.}"
  mount --bind "$work/sysctl/${key//\//.}" "/proc/sys/$key"
done <<'EOF'
vm/overcommit_memory 1
vm/panic_on_oom 0
kernel/panic 10
kernel/panic_on_oops 1
kernel/keys/root_maxkeys 1000000
kernel/keys/root_maxbytes 25000000
EOF

mkdir -p "$work/var-log" "$work/var-lib-kubelet"
mount --bind "$work/var-log" /var/log
mount --bind "$work/var-lib-kubelet" /var/lib/kubelet

exec "$@"
