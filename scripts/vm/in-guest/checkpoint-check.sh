#!/usr/bin/env bash
# Inside the guest, where CRIU runs (the development host's kernel is newer
# than its CRIU): CheckpointContainer with crictl, then a restore from the
# archive. One container, a counter printing a number a second:
#
#   - `crictl checkpoint --export=ARCHIVE` writes an archive in CRI-O's
#     layout (config.dump naming the container, spec.dump, checkpoint/ with
#     CRIU's images, rootfs-diff.tar with the file it wrote, deleted.files
#     with the one it removed, dump.log), and the container runs on;
#   - removed, and created again in the same pod from the archive (its path
#     as the image) and started: it counts on from where the dump found it,
#     with the file it wrote and without the one it removed.
#
# Then a pod (KEP-5823), through berth-bench, as kubelet would call it
# (crictl has no pod checkpoint):
#
#   - a pod of two containers, one counting in memory, one that wrote a
#     file: CheckpointPod writes checkpoint-manifest.json, pod-config.pb
#     and one archive per container into an empty directory, and both run
#     on;
#   - the pod removed, RestorePod makes a new pod whose two containers are
#     created, not started; started, the counter counts on from the dump,
#     the other has its file, both in the new pod's namespaces.
#
# Prints one PASS/FAIL line per check and exits non-zero on any FAIL.
#
#   checkpoint-check.sh WORK_DIR BIN_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=checks.sh
source "$here/checks.sh" "${1:?WORK_DIR}" "${2:?BIN_DIR}" 600
image=registry.k8s.io/e2e-test-images/busybox:1.29-2

finish() {
  checks_done checkpoint-check
  exit
}
berthd_tail() { tail -n 8 "$work/berthd.log" | cut -c1-400; }

echo "criu: $(criu --version 2>&1 | head -1); criu check: $(criu check 2>&1 | tail -1)"
bash "$here/berthd.sh" start "$work" "$bin" || exit 1
trap 'bash "$here/berthd.sh" stop "$work"' EXIT
cri pull "$image" >/dev/null || fail "pull $image" "$(berthd_tail)"

# The numbers the container printed, in order (CRI log: time stream tag line).
numbers() { awk '{print $4}' "$1" 2>/dev/null | grep -E '^[0-9]+$'; }
last_number() { numbers "$1" | tail -n 1; }
# wait_count LOG N: until LOG holds a number >= N (5 minutes at most).
wait_count() {
  local n
  for _ in $(seq 600); do
    n="$(last_number "$1")"
    [[ -n "$n" ]] && ((n >= $2)) && return 0
    sleep 0.5
  done
  return 1
}

cat >"$work/pod.json" <<JSON
{"metadata": {"name": "ckpt", "namespace": "default", "uid": "ckpt-uid", "attempt": 0},
 "log_directory": "$work/logs"}
JSON
counter='echo ckpt >/marker; rm -f /bin/wget; i=0; while :; do echo $i; i=$((i+1)); sleep 1; done'
cat >"$work/ctr.json" <<JSON
{"metadata": {"name": "counter"},
 "image": {"image": "$image"},
 "command": ["sh", "-c", "$counter"],
 "log_path": "counter.log"}
JSON
log="$work/logs/counter.log"
pod_id="$(cri runp "$work/pod.json")" || { fail "pod runs" "$(berthd_tail)"; finish; }
ctr_id="$(cri create "$pod_id" "$work/ctr.json" "$work/pod.json")" &&
  cri start "$ctr_id" >/dev/null || { fail "counter runs" "$(berthd_tail)"; finish; }
wait_count "$log" 3 || { fail "counter counts" "$(tail -n 3 "$log")"; finish; }
pass "counter counts"

archive="$work/counter.tar"
before="$(last_number "$log")"
start=$SECONDS
if out="$(cri checkpoint --export="$archive" "$ctr_id" 2>&1)"; then
  pass "crictl checkpoint --export (in $((SECONDS - start)) s)"
else
  fail "crictl checkpoint --export" "$out / $(berthd_tail)"
  finish
fi
at_dump="$(last_number "$log")"
members="$(tar -tf "$archive" 2>&1)"
for member in config.dump spec.dump rootfs-diff.tar deleted.files dump.log stats-dump \
  checkpoint/inventory.img; do
  grep -qxF "$member" <<<"$members" && pass "archive has $member" ||
    fail "archive has $member" "$(tr '\n' ' ' <<<"$members" | cut -c1-300)"
done
check "config.dump names the container" "$ctr_id counter" \
  "$(tar -xOf "$archive" config.dump | jq -r '"\(.id) \(.name)"')"
check "spec.dump is its OCI spec" "sh" "$(tar -xOf "$archive" spec.dump | jq -r '.process.args[0]')"
check "rootfs-diff.tar has the file it wrote" "marker" \
  "$(tar -xOf "$archive" rootfs-diff.tar | tar -t | grep -x marker)"
check "deleted.files has the file it removed" "/bin/wget" \
  "$(tar -xOf "$archive" deleted.files | jq -r '.[]' | grep -x /bin/wget)"
check "archive is private" "600" "$(stat -c %a "$archive")"
check "the container runs on after the checkpoint" CONTAINER_RUNNING \
  "$(cri inspect "$ctr_id" 2>/dev/null | jq -r .status.state)"
if wait_count "$log" "$((at_dump + 2))"; then
  pass "it keeps counting after the checkpoint"
else
  fail "it keeps counting after the checkpoint" "stuck at $(last_number "$log")"
fi
check "exec works after the checkpoint" "ckpt" "$(cri exec "$ctr_id" cat /marker 2>&1)"

# Its namespaces: the restored one must be in the same pod ones.
pid_of() { cri inspect "$1" 2>/dev/null | jq -r .info.pid; }
namespaces() { for ns in net ipc uts; do readlink "/proc/$1/ns/$ns"; done | tr '\n' ' '; }
pod_namespaces="$(namespaces "$(pid_of "$ctr_id")")"

# The restore: the original goes, and a container created in its pod from
# the archive (its path as the image) counts on from the dump.
cri rm -f "$ctr_id" >/dev/null || fail "the original is removed" "$(berthd_tail)"
jq --arg archive "$archive" '.image.image = $archive | .log_path = "restored.log"' \
  "$work/ctr.json" >"$work/restored.json"
restored_log="$work/logs/restored.log"
if restored="$(cri create --no-pull "$pod_id" "$work/restored.json" "$work/pod.json" 2>&1)"; then
  pass "create from the archive"
else
  fail "create from the archive" "$restored / $(berthd_tail)"
  finish
fi
check "it is made from the checkpoint's image" "$image" \
  "$(cri inspect "$restored" 2>/dev/null | jq -r .status.image.image)"
start=$SECONDS
if out="$(cri start "$restored" 2>&1)"; then
  pass "start restores it (in $((SECONDS - start)) s)"
else
  fail "start restores it" "$out / $(berthd_tail)"
  finish
fi
if wait_count "$restored_log" 0; then
  first="$(numbers "$restored_log" | head -n 1)"
  if ((first > before)); then
    pass "it counts on from the dump (first $first, $before before the dump, $at_dump at it)"
  else
    fail "it counts on from the dump" "first $first, $before before the dump"
  fi
else
  fail "the restored container prints" "$(tail -n 3 "$restored_log" 2>&1) / $(berthd_tail)"
fi
check "the restored container runs" CONTAINER_RUNNING \
  "$(cri inspect "$restored" 2>/dev/null | jq -r .status.state)"
restored_pid="$(pid_of "$restored")"
check "its init is the shim's child" berth-shim \
  "$(ps -o comm= -p "$(ps -o ppid= -p "$restored_pid" | tr -d ' ')" 2>&1)"
check "it is in its own scope" "berth-$restored.scope" \
  "$(sed -n 's|^0::.*/||p' "/proc/$restored_pid/cgroup")"
check "it is in the pod's net, ipc and uts namespaces" "$pod_namespaces" \
  "$(namespaces "$restored_pid")"
check "its rootfs has the file it wrote" "ckpt" "$(cri exec "$restored" cat /marker 2>&1)"
check "and not the one it removed" "gone" \
  "$(cri exec "$restored" sh -c 'test -e /bin/wget && echo there || echo gone' 2>&1)"
if cri stop --timeout 5 "$restored" >/dev/null; then
  check "it stops" CONTAINER_EXITED "$(cri inspect "$restored" 2>/dev/null | jq -r .status.state)"
else
  fail "it stops" "$(berthd_tail)"
fi

# ------------------------------------------------------------ the pod
bench() { berth-bench --socket "$work/berth.sock" --runtime berth --out "$work/bench.jsonl" "$@"; }
# Each container its own PID namespace, as kubelet's default: the restore
# then makes the dumped ones again.
cat >"$work/pod2.json" <<JSON
{"metadata": {"name": "ckpt-pod", "namespace": "default", "uid": "ckpt-pod-uid", "attempt": 0},
 "hostname": "ckpt-pod", "log_directory": "$work/podlogs",
 "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
JSON
keeper='echo kept >/kept; while :; do sleep 1; done'
cat >"$work/keeper.json" <<JSON
{"metadata": {"name": "keeper"},
 "image": {"image": "$image"},
 "command": ["sh", "-c", "$keeper"],
 "log_path": "keeper.log"}
JSON
pod_log="$work/podlogs/counter.log"
pod2="$(cri runp "$work/pod2.json")" || { fail "the pod runs" "$(berthd_tail)"; finish; }
counter2="$(cri create "$pod2" "$work/ctr.json" "$work/pod2.json")" &&
  cri start "$counter2" >/dev/null &&
  keeper2="$(cri create "$pod2" "$work/keeper.json" "$work/pod2.json")" &&
  cri start "$keeper2" >/dev/null || { fail "its two containers run" "$(berthd_tail)"; finish; }
wait_count "$pod_log" 3 || { fail "the pod's counter counts" "$(tail -n 3 "$pod_log")"; finish; }
pass "a pod of two containers runs, its counter counts"

podckpt="$work/podckpt"
mkdir -p "$podckpt"
pod_before_ckpt="$(last_number "$pod_log")"
start=$SECONDS
if out="$(bench checkpoint-pod --pod "$pod2" --output "$podckpt" \
  --container "$counter2" --container "$keeper2" 2>&1)"; then
  pass "CheckpointPod (in $((SECONDS - start)) s)"
else
  fail "CheckpointPod" "$out / $(berthd_tail)"
  finish
fi
pod_at_dump="$(last_number "$pod_log")"
check "the checkpoint's members" "checkpoint-manifest.json containers pod-config.pb" \
  "$(ls -A "$podckpt" | tr '\n' ' ' | sed 's/ $//')"
manifest="$podckpt/checkpoint-manifest.json"
check "the manifest names both containers" "berth 1 $pod2 counter=$counter2 keeper=$keeper2" \
  "$(jq -r '"\(.runtime) \(.version) \(.sandboxId) " + ([.containers[] | "\(.name)=\(.id)"] | join(" "))' "$manifest")"
archives_ok=yes
for archive in $(jq -r '.containers[].archive' "$manifest"); do
  [[ "$(stat -c %a "$podckpt/$archive")" == 600 ]] &&
    tar -tf "$podckpt/$archive" | grep -qx checkpoint/inventory.img &&
    [[ "$(sha256sum <"$podckpt/$archive" | cut -d' ' -f1)" == \
      "$(jq -r --arg a "$archive" '.containers[] | select(.archive == $a) | .sha256' "$manifest")" ]] ||
    archives_ok="no: $archive"
done
check "each archive is private, holds CRIU's images and its checksum" yes "$archives_ok"
check "both run on after the checkpoint" "CONTAINER_RUNNING CONTAINER_RUNNING" \
  "$(for c in "$counter2" "$keeper2"; do cri inspect "$c" | jq -r .status.state; done | tr '\n' ' ' | sed 's/ $//')"
if wait_count "$pod_log" "$((pod_at_dump + 2))"; then
  pass "the pod's counter keeps counting after the checkpoint"
else
  fail "the pod's counter keeps counting after the checkpoint" "stuck at $(last_number "$pod_log")"
fi
cri stopp "$pod2" >/dev/null && cri rmp "$pod2" >/dev/null ||
  fail "the checkpointed pod is removed" "$(berthd_tail)"
pod_removed_at="$(last_number "$pod_log")"
# Every file of the checkpoint: RestorePod must not change any.
contents() { (cd "$podckpt" && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
podckpt_contents="$(contents)"

start=$SECONDS
if restored_json="$(bench restore-pod --dir "$podckpt" --log-directory "$work/podlogs2" 2>&1)"; then
  pass "RestorePod (in $((SECONDS - start)) s)"
else
  fail "RestorePod" "$restored_json / $(berthd_tail)"
  finish
fi
pod3="$(jq -r .pod_sandbox_id <<<"$restored_json")"
counter3="$(jq -r .containers.counter <<<"$restored_json")"
keeper3="$(jq -r .containers.keeper <<<"$restored_json")"
if [[ -n "$pod3" && "$pod3" != "$pod2" && "$counter3" != "$counter2" && "$keeper3" != "$keeper2" &&
  "$counter3" != null && "$keeper3" != null ]]; then
  pass "a new pod and two new containers ($pod3)"
else
  fail "a new pod and two new containers" "$restored_json"
  finish
fi
check "the new pod is ready, with the checkpointed pod's name" "SANDBOX_READY ckpt-pod" \
  "$(cri inspectp "$pod3" | jq -r '"\(.status.state) \(.status.metadata.name)"')"
check "its containers are created, not started" "CONTAINER_CREATED CONTAINER_CREATED" \
  "$(for c in "$counter3" "$keeper3"; do cri inspect "$c" | jq -r .status.state; done | tr '\n' ' ' | sed 's/ $//')"
check "made from the checkpoint's image" "$image $image" \
  "$(for c in "$counter3" "$keeper3"; do cri inspect "$c" | jq -r .status.image.image; done | tr '\n' ' ' | sed 's/ $//')"
check "the checkpoint is left as it was" "$podckpt_contents" "$(contents)"
start=$SECONDS
if out="$(cri start "$counter3" 2>&1)" && out="$(cri start "$keeper3" 2>&1)"; then
  pass "starting them restores them (in $((SECONDS - start)) s)"
else
  fail "starting them restores them" "$out / $(berthd_tail)"
  finish
fi
restored_pod_log="$work/podlogs2/counter.log"
if wait_count "$restored_pod_log" 0; then
  first="$(numbers "$restored_pod_log" | head -n 1)"
  # Past what it had counted before the checkpoint (not from 0), and
  # not past what it had counted when the checkpoint was done: the
  # dumped memory, not the removed pod's later count.
  if ((first > pod_before_ckpt && first <= pod_at_dump + 1 && pod_at_dump + 1 < pod_removed_at)); then
    pass "the counter counts on from the dump, in memory (first $first; $pod_before_ckpt before the checkpoint, $pod_at_dump after it, $pod_removed_at at the removal)"
  else
    fail "the counter counts on from the dump" "first $first; $pod_before_ckpt before the checkpoint, $pod_at_dump after it, $pod_removed_at at the removal"
  fi
else
  fail "the restored counter prints" "$(tail -n 3 "$restored_pod_log" 2>&1) / $(berthd_tail)"
fi
if wait_count "$restored_pod_log" "$((${first:-0} + 2))"; then
  pass "and goes on counting"
else
  fail "and goes on counting" "stuck at $(last_number "$restored_pod_log")"
fi
check "both restored containers run" "CONTAINER_RUNNING CONTAINER_RUNNING" \
  "$(for c in "$counter3" "$keeper3"; do cri inspect "$c" | jq -r .status.state; done | tr '\n' ' ' | sed 's/ $//')"
check "the other has the file it wrote" "kept" "$(cri exec "$keeper3" cat /kept 2>&1)"
counter3_pid="$(pid_of "$counter3")"
keeper3_pid="$(pid_of "$keeper3")"
check "the restored inits are the shim's children" "berth-shim berth-shim" \
  "$(for p in "$counter3_pid" "$keeper3_pid"; do ps -o comm= -p "$(ps -o ppid= -p "$p" | tr -d ' ')"; done | tr '\n' ' ' | sed 's/ $//')"
check "each in its own scope" "berth-$counter3.scope berth-$keeper3.scope" \
  "$(for p in "$counter3_pid" "$keeper3_pid"; do sed -n 's|^0::.*/||p' "/proc/$p/cgroup"; done | tr '\n' ' ' | sed 's/ $//')"
check "both in the new pod's net, ipc and uts namespaces" "$(namespaces "$counter3_pid")" \
  "$(namespaces "$keeper3_pid")"
[[ "$(namespaces "$counter3_pid")" != "$pod_namespaces" ]] &&
  pass "which are not the first pod's" || fail "which are not the first pod's" "$pod_namespaces"
if cri stopp "$pod3" >/dev/null && cri rmp "$pod3" >/dev/null; then
  check "the restored pod is removed with its containers" "0" \
    "$(cri ps -a -q --pod "$pod3" 2>/dev/null | wc -l)"
else
  fail "the restored pod is removed" "$(berthd_tail)"
fi

finish
