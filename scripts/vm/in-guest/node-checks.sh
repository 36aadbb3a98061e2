#!/usr/bin/env bash
# Inside the systemd + cgroup v2 guest: what a real node needs of berth's
# cgroups, checked with crictl against a berthd whose driver is "auto".
# Prints one PASS/FAIL line per check and exits non-zero on any FAIL.
#
#   node-checks.sh WORK_DIR BIN_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=checks.sh
source "$here/checks.sh" "${1:?WORK_DIR}" "${2:?BIN_DIR}" 120
image=registry.k8s.io/e2e-test-images/busybox:1.29-2
limit=67108864

bash "$here/berthd.sh" start "$work" "$bin" || exit 1
trap 'bash "$here/berthd.sh" stop "$work"' EXIT

check "cgroup driver from RuntimeConfig is systemd" SYSTEMD \
  "$(cri runtime-config 2>/dev/null | awk -F: '/cgroup driver/ {gsub(/ /, "", $2); print $2}')"
cri pull "$image" >/dev/null || fail "pull $image" "see berthd.log"

# pod NAME PARENT [SCRIPT]: a pod under PARENT with one limited container
# running SCRIPT (default: a sleep); prints "POD_ID CONTAINER_ID".
pod() {
  local name="$1" parent="$2" script="${3:-sleep 3600}" pod_id ctr_id
  cat >"$work/$name-pod.json" <<JSON
{"metadata": {"name": "$name", "namespace": "default", "uid": "$name-uid", "attempt": 0},
 "log_directory": "$work/logs/$name",
 "linux": {"cgroup_parent": "$parent"}}
JSON
  cat >"$work/$name-ctr.json" <<JSON
{"metadata": {"name": "app"},
 "image": {"image": "$image"},
 "command": ["sh", "-c", "$script"],
 "log_path": "app.log",
 "linux": {"resources": {"memory_limit_in_bytes": $limit, "cpu_quota": 50000,
                         "cpu_period": 100000, "cpu_shares": 512}}}
JSON
  pod_id="$(cri runp "$work/$name-pod.json")" || return 1
  ctr_id="$(cri create "$pod_id" "$work/$name-ctr.json" "$work/$name-pod.json")" || return 1
  cri start "$ctr_id" >/dev/null || return 1
  echo "$pod_id $ctr_id"
}

# shim_logged CONTAINER_ID REGEX: "yes" when the container's shim logged a
# line matching REGEX.
shim_logged() {
  grep -q "$2" "$work/state/shims/${1:0:12}/shim.log" && echo yes || echo no
}

# How many mounts the host's table has at exactly PATH.
mounts_at() { findmnt -rn -o TARGET | grep -cxF "$1"; }

# The unit's cgroup path, as systemd reports it.
unit_cgroup() { systemctl show -P ControlGroup "$1" 2>/dev/null; }

# A pod as kubelet sends it (the slice's expanded path, its
# CgroupName.ToSystemd), one under a slice name as crictl users write it,
# and one with an empty parent, as critest sends (system.slice).
for spec in "kubelet:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podsmoke.slice:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podsmoke.slice" \
  "named:kubepods-besteffort-podnamed.slice:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podnamed.slice" \
  "default::/system.slice"; do
  IFS=: read -r name parent slice_path <<<"$spec"
  if ! ids="$(pod "$name" "$parent")"; then
    fail "$name pod runs a container" "$(tail -n 5 "$work/berthd.log")"
    continue
  fi
  pass "$name pod runs a container"
  read -r pod_id ctr_id <<<"$ids"
  # The container was created in a trimmed mount table (its state dir is a
  # tmpfs, see berthd.sh): nothing done there may reach the host's table,
  # where / is shared.
  check "$name: the container was created in a trimmed mount table" yes \
    "$(shim_logged "$ctr_id" "created the container in a trimmed mount table")"
  check "$name: the state dir is mounted once on the host" 1 "$(mounts_at "$work/state")"
  check "$name: nothing is mounted on the container's record dir" 0 \
    "$(mounts_at "$work/state/containers/$ctr_id")"
  scope="berth-$ctr_id.scope"
  if systemctl status "$scope" >/dev/null 2>&1 || [[ $? == 3 ]]; then
    pass "$name: systemctl status finds $scope"
  else
    fail "$name: systemctl status finds $scope" "$(systemctl status "$scope" 2>&1 | head -3)"
  fi
  check "$name: $scope is active" active "$(systemctl is-active "$scope" 2>/dev/null)"
  check "$name: $scope is in the pod's slice" "$slice_path/$scope" "$(unit_cgroup "$scope")"
  dir="/sys/fs/cgroup$slice_path/$scope"
  check "$name: memory.max carries the limit" "$limit" "$(cat "$dir/memory.max" 2>&1)"
  check "$name: cpu.max carries the quota" "50000 100000" "$(cat "$dir/cpu.max" 2>&1)"
  check "$name: own cgroup namespace inside" "0::/" "$(cri exec "$ctr_id" cat /proc/self/cgroup 2>&1)"
  check "$name: memory.max readable inside" "$limit" \
    "$(cri exec "$ctr_id" cat /sys/fs/cgroup/memory.max 2>&1)"
  check "$name: execs start from a trimmed mount table" yes \
    "$(shim_logged "$ctr_id" "\(exec\|session\) started.*trimmed=true")"
  check "$name: crictl stats has its row" "$ctr_id" \
    "$(cri stats -o json 2>/dev/null | jq -r --arg id "$ctr_id" '.stats[] | select(.attributes.id == $id) | .attributes.id')"
  check "$name: stats report memory" true \
    "$(cri stats -o json 2>/dev/null | jq -r --arg id "$ctr_id" '.stats[] | select(.attributes.id == $id) | (.memory.workingSetBytes.value // 0 | tonumber) > 0')"
  # Pressure (PSI) of cpu, memory and io in the container's stats; the
  # pod's too when its parent is its own (not the shared default one).
  check "$name: stats report cpu, memory and io pressure" true \
    "$(cri stats -o json 2>/dev/null | jq -r --arg id "$ctr_id" '.stats[] | select(.attributes.id == $id) | [.cpu.psi, .memory.psi, .io.psi] | map(. != null and ((.Some // .some) != null)) | all')"
  own_parent=true
  [[ -z "$parent" ]] && own_parent=false
  check "$name: pod stats report pressure: $own_parent" "$own_parent" \
    "$(cri statsp -o json 2>/dev/null | jq -r --arg id "$pod_id" '.stats[] | select(.attributes.id == $id) | .linux.cpu.psi != null')"
  # Block IO: 4 MiB written and synced by an exec in the container are
  # counted in its cgroup's io.stat and show in the pod's metrics, once
  # berthd's stats sampler has read them (every stats_collection_period,
  # 10 s here): asked for up to three periods.
  cri exec "$ctr_id" dd if=/dev/zero of=/written bs=1048576 count=4 conv=fsync >/dev/null 2>&1
  for _ in $(seq 30); do
    written="$(cri metricsp -o json 2>/dev/null | jq -r --arg id "$ctr_id" '[.. | objects | select(.name? == "container_fs_writes_bytes_total" and ((.labelValues // .label_values // [])[0] == $id)) | (.value.value // 0 | tonumber)] | add // 0')"
    [[ "${written:-0}" -ge 4194304 ]] && break
    sleep 1
  done
  check "$name: metrics count the container's 4 MiB written" true "$([[ "${written:-0}" -ge 4194304 ]] && echo true || echo "false ($written)")"
  # cadvisor's settings and counters, read from the scope's cgroup v2 files:
  # the limits as set, and the swap and thread counts kubelet's
  # /metrics/cadvisor shows.
  metrics="$(cri metricsp -o json 2>/dev/null)"
  metric() {
    jq -r --arg id "$ctr_id" --arg name "$1" '[.. | objects | select(.name? == $name and ((.labelValues // .label_values // [])[0] == $id)) | (.value.value // 0 | tonumber)] | first // "none"' <<<"$metrics"
  }
  check "$name: metrics report the cpu quota" 50000 "$(metric container_spec_cpu_quota)"
  check "$name: metrics report the memory limit" "$limit" "$(metric container_spec_memory_limit_bytes)"
  for counter in container_memory_swap container_threads container_memory_kernel_usage \
    container_memory_max_usage_bytes container_cpu_cfs_periods_total container_processes; do
    check "$name: metrics report $counter" true \
      "$(value="$(metric "$counter")"; [[ "$value" != none ]] && echo true || echo "false ($value)")"
  done
  # systemd rewrites a unit's cgroup from its properties on every
  # daemon-reload: limits written only to the files would be lost.
  systemctl daemon-reload
  check "$name: memory.max survives daemon-reload" "$limit" "$(cat "$dir/memory.max" 2>&1)"
  check "$name: cpu.max survives daemon-reload" "50000 100000" "$(cat "$dir/cpu.max" 2>&1)"
  if cri update --memory "$((2 * limit))" --cpu-quota 80000 --cpu-period 100000 "$ctr_id" >/dev/null; then
    check "$name: update sets memory.max" "$((2 * limit))" "$(cat "$dir/memory.max" 2>&1)"
    check "$name: update sets cpu.max" "80000 100000" "$(cat "$dir/cpu.max" 2>&1)"
    systemctl daemon-reload
    check "$name: updated memory.max survives daemon-reload" "$((2 * limit))" "$(cat "$dir/memory.max" 2>&1)"
    check "$name: updated cpu.max survives daemon-reload" "80000 100000" "$(cat "$dir/cpu.max" 2>&1)"
  else
    fail "$name: crictl update" "$(tail -n 5 "$work/berthd.log")"
  fi
  cri stopp "$pod_id" >/dev/null && cri rmp "$pod_id" >/dev/null ||
    fail "$name: pod removed" "$(tail -n 5 "$work/berthd.log")"
  check "$name: $scope is gone with the pod" "" "$(systemctl list-units --all --plain --no-legend "$scope" 2>/dev/null)"
  [[ -d "$dir" ]] && fail "$name: cgroup dir removed" "$dir remains" || pass "$name: cgroup dir removed"
done
# A container that outgrows its memory limit: the kernel's OOM killer ends
# it, and berth reports it as kubelet expects (reason OOMKilled, from the
# scope's memory.events).
# The container's init holds 200 MB in a shell variable, past its 64 MiB.
if ids="$(pod oom "" 'x=$(yes | head -c 200000000); sleep 3600')"; then
  read -r pod_id ctr_id <<<"$ids"
  state=""
  for _ in $(seq 120); do
    state="$(cri inspect "$ctr_id" 2>/dev/null | jq -r '"\(.status.state) \(.status.reason)"')"
    [[ "$state" == CONTAINER_EXITED* ]] && break
    sleep 0.5
  done
  check "oom: the container is OOM-killed and says so" "CONTAINER_EXITED OOMKilled" "$state"
  cri stopp "$pod_id" >/dev/null && cri rmp "$pod_id" >/dev/null || fail "oom: pod removed" "$(tail -n 5 "$work/berthd.log")"
else
  fail "oom pod runs a container" "$(tail -n 5 "$work/berthd.log")"
fi

check "nothing is left mounted under the state dir" "" \
  "$(findmnt -rn -o TARGET | awk -v d="$work/state" 'index($0, d "/") == 1')"

# berth started the kubelet-style slices itself (no kubelet here), so it
# must have stopped them once empty.
check "pod slices berth started are gone" "" \
  "$(systemctl list-units --all --plain --no-legend 'kubepods*' 2>/dev/null)"

checks_done node-checks
