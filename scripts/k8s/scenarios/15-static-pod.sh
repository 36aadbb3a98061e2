# A static pod with cpu and memory limits, run by kubelet from a manifest
# file: its containers' cgroups carry the limits, under the cgroup driver
# kubelet took from berth (systemd: each container a berth-<id>.scope unit in
# the pod's slice, as systemctl sees it); with the manifest gone, the
# containers, their cgroups and the pod's cgroup are gone too. Sourced by
# scripts/k8s/e2e.sh.

SCENARIOS+=("static-pod scn_static_pod")

STATIC_POD=static-limits
# 250m and 96Mi for "app", 500m and 48Mi for "side": distinct, so a limit
# applied to the wrong container shows.
STATIC_LIMITS="app 25000 100663296
side 50000 50331648"

static_pod_manifest() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $STATIC_POD, namespace: $NS}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: $BUSYBOX
    command: [sleep, "36000"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 250m, memory: 96Mi}
  - name: side
    image: $BUSYBOX
    command: [sleep, "36000"]
    resources:
      limits: {cpu: 500m, memory: 48Mi}
EOF
}

# crictl against the stage's berthd.
crictl_berth() { crictl --runtime-endpoint "unix://$WORK/berth.sock" "$@"; }

# static_containers [-a]: ids of the static pod's containers (kubelet names
# a static pod <name>-<node>).
static_containers() {
  crictl_berth ps -q "$@" --label "io.kubernetes.pod.namespace=$NS" \
    --label "io.kubernetes.pod.name=$STATIC_POD-$NODE"
}

# running_static_containers: "name id" of its running containers, once both are.
running_static_containers() {
  local ids id
  ids="$(static_containers)" || return 1
  [[ "$(wc -w <<<"$ids")" == 2 ]] || return 1
  for id in $ids; do
    echo "$(crictl_berth inspect "$id" | jq -r .status.metadata.name) $id"
  done
}

# pid_cgroup PID CONTROLLER: the directory of PID's cgroup in CONTROLLER's
# hierarchy (the one unified hierarchy on cgroup v2).
pid_cgroup() {
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$1/cgroup")"
  else
    awk -F: -v c="$2" '{ n = split($2, cs, ","); for (i = 1; i <= n; i++) if (cs[i] == c) print "/sys/fs/cgroup/" c $3 }' \
      "/proc/$1/cgroup"
  fi
}

# cgroup_limits DIR_CPU DIR_MEMORY: "quota memory-limit" in either version.
cgroup_limits() {
  if [[ -f "$1/cpu.max" ]]; then
    echo "$(cut -d' ' -f1 "$1/cpu.max") $(cat "$2/memory.max")"
  else
    echo "$(cat "$1/cpu.cfs_quota_us") $(cat "$2/memory.limit_in_bytes")"
  fi
}

scn_static_pod() {
  local manifest="$WORK/manifests/$STATIC_POD.yaml" containers name id pid cpu mem want
  local dirs=() units=() slice="" pod_dir=""
  static_pod_manifest >"$manifest"
  wait_until 180 running_static_containers ||
    fail "the static pod's containers are not running after 180 s: $(static_containers -a | tr '\n' ' ')"
  containers="$(running_static_containers)"
  # The mirror pod kubelet posts for it.
  wait_until 60 eval '[[ "$(jpath "pod/$STATIC_POD-$NODE" "{.status.phase}")" == Running ]]' ||
    fail "mirror pod $STATIC_POD-$NODE is not Running: $(pod_summary "$STATIC_POD-$NODE")"

  while read -r name id; do
    pid="$(crictl_berth inspect "$id" | jq -r .info.pid)"
    cpu="$(pid_cgroup "$pid" cpu)"
    mem="$(pid_cgroup "$pid" memory)"
    [[ -d "$cpu" && -d "$mem" ]] || fail "$name: no cgroup dirs for pid $pid ('$cpu', '$mem')"
    want="$(awk -v n="$name" '$1 == n {print $2, $3}' <<<"$STATIC_LIMITS")"
    [[ "$(cgroup_limits "$cpu" "$mem")" == "$want" ]] ||
      fail "$name: cgroup limits '$(cgroup_limits "$cpu" "$mem")' in $cpu, want '$want'"
    dirs+=("$cpu" "$mem")
    pod_dir="$(dirname "$cpu")"
    case "$KUBELET_CGROUP_DRIVER" in
    systemd)
      local unit="${cpu##*/}" parent
      parent="$(basename "$(dirname "$cpu")")"
      [[ "$unit" == "berth-$id.scope" ]] || fail "$name: cgroup $cpu is not berth-$id.scope"
      [[ "$parent" == kubepods-burstable-pod*.slice ]] ||
        fail "$name: scope's parent $parent is not the pod's burstable slice"
      systemctl status --no-pager "$unit" >"$WORK/scenarios/$unit.status" 2>&1 ||
        fail "$name: systemctl status $unit: $(head -n 3 "$WORK/scenarios/$unit.status")"
      [[ "$(systemctl show -P Slice "$unit")" == "$parent" ]] ||
        fail "$name: systemd puts $unit in '$(systemctl show -P Slice "$unit")', not $parent"
      [[ "$(systemctl show -P ActiveState "$unit")" == active ]] || fail "$name: $unit is not active"
      units+=("$unit")
      slice="$parent"
      ;;
    cgroupfs)
      [[ "$cpu" == */kubepods/burstable/pod*/*"$id"* ]] ||
        fail "$name: cgroup $cpu is not under kubepods/burstable/pod<uid>"
      ;;
    *) fail "kubelet's cgroup driver '$KUBELET_CGROUP_DRIVER' is unknown" ;;
    esac
  done <<<"$containers"

  rm -f "$manifest"
  wait_until 60 eval '! kubectl get pod "$STATIC_POD-$NODE"' ||
    fail "mirror pod $STATIC_POD-$NODE remains after its manifest is gone"
  wait_until 60 eval '[[ -z "$(static_containers)" ]]' ||
    fail "containers still run after the manifest is gone: $(static_containers | tr '\n' ' ')"
  local dir unit
  for dir in "${dirs[@]}"; do
    wait_until 60 test ! -e "$dir" || fail "cgroup $dir remains after the pod is gone"
  done
  for unit in "${units[@]}"; do
    wait_until 30 eval '[[ "$(systemctl show -P LoadState "$unit")" == not-found ]]' ||
      fail "unit $unit remains ($(systemctl show -P ActiveState "$unit")) after the pod is gone"
  done
  # systemd loads any slice name asked about (a slice needs no unit file),
  # so a gone slice is an inactive one, without its cgroup.
  wait_until 60 test ! -e "$pod_dir" || fail "pod cgroup $pod_dir remains after the pod is gone"
  if [[ -n "$slice" && "$(systemctl show -P ActiveState "$slice")" != inactive ]]; then
    fail "pod slice $slice is $(systemctl show -P ActiveState "$slice") after the pod is gone"
  fi
  # kubelet removes a deleted pod's exited containers and sandbox by its
  # garbage collection, every minute.
  wait_until 150 eval '[[ -z "$(static_containers -a)" ]]' ||
    fail "containers of the deleted static pod remain in berth: $(static_containers -a | tr '\n' ' ')"
}
