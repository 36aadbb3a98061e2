# A pod with hostUsers: false and hostNetwork: true (KEP-5607, gate
# UserNamespacesHostNetworkSupport, alpha since 1.35, on for the API server
# and kubelet in scripts/k8s/lib/cluster.sh): kubelet runs it only on a node
# whose runtime reports user_namespaces_host_network, which berth does. The
# container runs in a user namespace of its own (uid_map is no identity)
# and in the host's network namespace, and its capabilities, the user
# namespace's, cannot change the host's network: adding a link or an
# address fails with EPERM. Its /sys is the host's, bound read-only (no
# sysfs can be mounted for a network namespace the pod does not own).
# Kubelet 1.36 has the gate too, so the skew run keeps the scenario.
# Sourced by scripts/k8s/e2e.sh.

# The pod has no tmpfs volume (no service-account token either): its
# /etc/hostname, /etc/hosts and resolv.conf, which are idmapped, are files
# under berth's root dir, on disk, so it runs from 5.19 on (the guest's 6.1
# too), where berth reports user namespaces.
if ((K8S_MINOR < 35)); then
  log "host-users-host-network left out: kubelet 1.$K8S_MINOR has no UserNamespacesHostNetworkSupport (1.35 or later)"
elif ! printf '%s\n' 5.19 "$(uname -r)" | sort -V -C; then
  log "host-users-host-network left out: kernel $(uname -r) has no idmapped overlayfs (5.19 or later needed)"
else
  SCENARIOS+=("host-users-host-network scn_host_users_host_network")
fi

# A link and an address nothing else makes: a dummy link, and a
# documentation address (RFC 5737).
HOSTNET_PROBE_LINK=berthk8sun0
HOSTNET_PROBE_ADDRESS=192.0.2.78/32

host_users_host_network_pod() {
  pod_header userns-hostnet
  cat <<EOF
  hostUsers: false
  hostNetwork: true
  automountServiceAccountToken: false
  containers:
  - name: app
    image: $BUSYBOX
    command: [sleep, "36000"]
EOF
}

# host_network_changed: what of the probes is on the host, removed again
# (so a failure leaves the host as it was).
host_network_changed() {
  local changed=()
  if [[ -e /sys/class/net/$HOSTNET_PROBE_LINK ]]; then
    changed+=("link $HOSTNET_PROBE_LINK")
    ip link del "$HOSTNET_PROBE_LINK" || true
  fi
  if ip -o addr show dev lo | grep -qF "$HOSTNET_PROBE_ADDRESS"; then
    changed+=("address $HOSTNET_PROBE_ADDRESS on lo")
    ip addr del "$HOSTNET_PROBE_ADDRESS" dev lo || true
  fi
  echo "${changed[*]}"
}

scn_host_users_host_network() {
  ensure_pod userns-hostnet host_users_host_network_pod
  local map pid out status changed host_net
  read -r -a map <<<"$(kubectl exec userns-hostnet -c app -- cat /proc/self/uid_map)"
  [[ "${map[0]:-}" == 0 && "${map[1]:-0}" =~ ^[0-9]+$ && "${map[1]}" != 0 && "${map[2]:-}" == 65536 ]] ||
    fail "uid_map is not one mapping of 0 to an unprivileged range: ${map[*]:-none}"

  host_net="$(readlink /proc/self/ns/net)"
  out="$(kubectl exec userns-hostnet -c app -- readlink /proc/self/ns/net)"
  [[ "$out" == "$host_net" ]] || fail "the container's network namespace is $out, not the host's $host_net"
  # The container's own process, seen from the host.
  pid="$(pgrep -x -U "${map[1]}" sleep || true)"
  [[ -n "$pid" ]] || fail "no sleep runs as host uid ${map[1]}"
  [[ "$(readlink "/proc/$pid/ns/net")" == "$host_net" ]] ||
    fail "pid $pid is not in the host's network namespace"
  [[ "$(readlink "/proc/$pid/ns/user")" != "$(readlink /proc/self/ns/user)" ]] ||
    fail "pid $pid is in the host's user namespace"

  status=0
  out="$(kubectl exec userns-hostnet -c app -- ip link add "$HOSTNET_PROBE_LINK" type dummy 2>&1)" || status=$?
  changed="$(host_network_changed)"
  [[ -z "$changed" ]] || fail "the container changed the host's network: $changed"
  ((status != 0)) || fail "ip link add succeeded: $out"
  grep -q 'Operation not permitted' <<<"$out" || fail "ip link add failed otherwise: $out"
  status=0
  out="$(kubectl exec userns-hostnet -c app -- ip addr add "$HOSTNET_PROBE_ADDRESS" dev lo 2>&1)" || status=$?
  changed="$(host_network_changed)"
  [[ -z "$changed" ]] || fail "the container changed the host's network: $changed"
  ((status != 0)) || fail "ip addr add succeeded: $out"
  grep -q 'Operation not permitted' <<<"$out" || fail "ip addr add failed otherwise: $out"

  # /sys: the host's (a host interface other than lo is there), read-only.
  local host_if
  host_if="$(find /sys/class/net -mindepth 1 -maxdepth 1 ! -name lo -printf '%f\n' | sort | head -n1)"
  out="$(kubectl exec userns-hostnet -c app -- ls /sys/class/net)"
  if [[ -n "$host_if" ]]; then
    grep -qxF "$host_if" <<<"$out" || fail "the host's $host_if is not in the container's /sys/class/net: $out"
  fi
  status=0
  out="$(kubectl exec userns-hostnet -c app -- touch /sys/kernel/berth-probe 2>&1)" || status=$?
  ((status != 0)) || fail "/sys is writable"
  grep -qi 'read-only' <<<"$out" || fail "writing to /sys failed otherwise: $out"

  kubectl delete pod userns-hostnet --wait=true --timeout=60s >/dev/null
}
