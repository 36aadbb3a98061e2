# Host state the Kubernetes stage changes, recorded before and put back after:
# kubelet's cgroups, the iptables chains kubelet and the portmap plugin add,
# kubelet's root dir bind mount and what is mounted under it, and the CNI
# bridge. Sourced by
# scripts/k8s/e2e.sh; every function acts only on what the stage made.

# Cgroups kubelet makes (cgroupRoot "/"): kubepods and its QoS, pod and
# container children, in every hierarchy; kubepods.slice and its slices
# under the systemd driver.
kubepods_cgroups() {
  compgen -G '/sys/fs/cgroup/*/kubepods*' || true
  compgen -G '/sys/fs/cgroup/kubepods*' || true
}

# host_check_clean: the stage removes every kubepods cgroup at the end, so it
# must not start when another kubelet (or a crashed run) owns some.
host_check_clean() {
  local left
  left="$(kubepods_cgroups)"
  if [[ -n "$left" ]]; then
    echo "k8s-e2e: kubelet cgroups already exist (another kubelet runs, or an earlier run crashed):" >&2
    echo "$left" >&2
    return 1
  fi
}

# iptables_chains: "<command> <table> <chain>" for every chain kubelet
# (KUBE-*) or the CNI portmap plugin (its shared CNI-HOSTPORT-* chains, which
# outlive the pods) may add.
iptables_chains() {
  local cmd table
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      "$cmd" -w -t "$table" -S 2>/dev/null |
        awk -v c="$cmd" -v t="$table" '$1 == "-N" && $2 ~ /^(KUBE-|CNI-HOSTPORT-)/ {print c, t, $2}'
    done
  done | sort
}

# host_snapshot DIR: what exists before the stage starts.
host_snapshot() {
  local dir="$1"
  iptables_chains >"$dir/iptables-chains.before"
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$dir/links.before"
}

# remove_kubepods_cgroups: deepest first; a cgroup with processes left in it
# cannot be removed and is reported.
remove_kubepods_cgroups() {
  local top dir status=0
  # Under the systemd driver they are units: stopping the top slice stops
  # every slice and scope in it, and systemd removes their cgroups.
  if [[ -d /run/systemd/system ]] && systemctl -q is-active kubepods.slice 2>/dev/null; then
    systemctl stop kubepods.slice || status=1
  fi
  for top in $(kubepods_cgroups); do
    [[ -d "$top" ]] || continue # cpu and cpuacct may be one hierarchy
    while IFS= read -r dir; do
      rmdir "$dir" 2>/dev/null || {
        echo "k8s-e2e: cannot remove cgroup $dir: $(tr '\n' ' ' <"$dir/cgroup.procs" 2>/dev/null)" >&2
        status=1
      }
    done < <(find "$top" -depth -type d)
  done
  return "$status"
}

# remove_new_iptables DIR: the chains iptables_chains lists that did not
# exist before, with the jumps to them from the built-in chains (kubelet's
# INPUT/OUTPUT jumps to KUBE-FIREWALL, portmap's to CNI-HOSTPORT-*). A
# CNI-HOSTPORT-DNAT still holding a pod's mapping is left, and reported.
remove_new_iptables() {
  local dir="$1" cmd table chain hook
  comm -13 "$dir/iptables-chains.before" <(iptables_chains) |
    while read -r cmd table chain; do
      if [[ "$chain" == CNI-HOSTPORT-DNAT ]] &&
        "$cmd" -w -t "$table" -S "$chain" | grep -q '^-A'; then
        echo "k8s-e2e: $cmd -t $table $chain still maps ports; left in place" >&2
        continue
      fi
      echo "$cmd $table $chain"
    done >"$dir/iptables-chains.new"
  while read -r cmd table chain; do
    for hook in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
      while "$cmd" -w -t "$table" -D "$hook" -j "$chain" 2>/dev/null; do :; done
    done
    "$cmd" -w -t "$table" -F "$chain" 2>/dev/null || true
  done <"$dir/iptables-chains.new"
  # Chains may jump to each other: delete only once all are flushed.
  while read -r cmd table chain; do
    "$cmd" -w -t "$table" -X "$chain" 2>/dev/null ||
      echo "k8s-e2e: cannot delete $cmd -t $table chain $chain" >&2
  done <"$dir/iptables-chains.new"
}

# remove_new_link DIR NAME: deletes the link NAME when it did not exist before.
remove_new_link() {
  local dir="$1" name="$2"
  grep -qx "$name" "$dir/links.before" && return 0
  ip link del "$name" 2>/dev/null || true
}
