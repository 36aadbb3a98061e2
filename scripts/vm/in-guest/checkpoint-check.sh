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

finish
