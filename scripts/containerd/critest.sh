#!/usr/bin/env bash
# Runs critest (cri-tools v1.37.0) against the containerd started by
# scripts/containerd/start.sh DIR, for comparison with berth:
#
#   scripts/containerd/critest.sh DIR REPORT_DIR [more critest/ginkgo flags...]
#   e.g. scripts/containerd/critest.sh /tmp/ctrd /tmp/critest-containerd
#        scripts/containerd/critest.sh /tmp/ctrd /tmp/bench -benchmark
#
# Before: removes every pod and image of that containerd (critest wants a
# runtime nobody else uses), and checks host ports 12000-12003 are free.
# Runs with --ginkgo.skip 'AppArmor|SELinux'. critest v1.37.0 ignores
# --report-dir, so the reports are asked from Ginkgo directly:
# REPORT_DIR/report.json (full spec texts), REPORT_DIR/junit.xml, and the
# console output in REPORT_DIR/critest.log.
# After: removes the 1 MiB SysV shared-memory segments the HostIpc specs made
# on the host during the run (new ids only, not attached).
# Exit status: critest's.
#
# Environment: BERTH_CRITEST, BERTH_CRICTL (binaries; default from PATH or
# /usr/local/bin).
set -euo pipefail

# shellcheck source=scripts/containerd/common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

[[ $# -ge 2 ]] || {
  echo "usage: $0 DIR REPORT_DIR [critest flags...]" >&2
  exit 2
}
set_paths "$1"
mkdir -p "$2"
REPORT_DIR="$(cd "$2" && pwd)"
shift 2

CRITEST=""
for c in "${BERTH_CRITEST:-}" "$(command -v critest 2>/dev/null || true)" /usr/local/bin/critest; do
  [[ -n "$c" && -x "$c" ]] && {
    CRITEST="$c"
    break
  }
done
[[ -n "$CRITEST" ]] || die "critest not found (BERTH_CRITEST; see scripts/install-deps.sh)"

running_pid >/dev/null && answers || die "containerd does not run from $DIR (scripts/containerd/start.sh $DIR)"

busy="$(ss -Hltn 2>/dev/null | awk '{print $4}' | grep -E ':1200[0-3]$' || true)"
[[ -z "$busy" ]] || die "host ports needed by critest are taken: $busy"

if crictl="$(find_crictl)"; then
  cri=("$crictl" --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 60s)
  mapfile -t pods < <("${cri[@]}" pods -q 2>/dev/null || true)
  for p in "${pods[@]}"; do
    [[ -n "$p" ]] || continue
    "${cri[@]}" stopp "$p" >/dev/null 2>&1 || true
    "${cri[@]}" rmp -f "$p" >/dev/null 2>&1 || true
  done
  "${cri[@]}" rmi --all >/dev/null 2>&1 || true
else
  log "warning: crictl not found: pods and images left from earlier runs are not removed"
fi

shm_ids() { awk 'NR > 1 {print $2}' /proc/sysvipc/shm | sort -n; }
shm_before="$(shm_ids)"

rc=0
"$CRITEST" \
  --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" \
  --ginkgo.skip 'AppArmor|SELinux' --ginkgo.timeout 25m --ginkgo.no-color \
  --report-dir "$REPORT_DIR" \
  --ginkgo.json-report "$REPORT_DIR/report.json" \
  --ginkgo.junit-report "$REPORT_DIR/junit.xml" \
  "$@" 2>&1 | tee "$REPORT_DIR/critest.log" || rc=$?

# Segments of this run: new ids, 1 MiB, not attached.
removed=()
while read -r key id perms size cpid lpid nattch rest; do
  [[ "$id" =~ ^[0-9]+$ ]] || continue
  grep -qx "$id" <<<"$shm_before" && continue
  [[ "$size" == 1048576 && "$nattch" == 0 ]] || continue
  ipcrm -m "$id" 2>/dev/null && removed+=("$id")
done < <(tail -n +2 /proc/sysvipc/shm)
((${#removed[@]} == 0)) || log "removed shared memory segments ${removed[*]}"

if command -v jq >/dev/null && [[ -s "$REPORT_DIR/report.json" ]]; then
  jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It" and .State != "passed" and .State != "skipped")
    | "\(.State): " + ((.ContainerHierarchyTexts | join(" ")) + " " + .LeafNodeText)' \
    "$REPORT_DIR/report.json" >"$REPORT_DIR/failed.txt" || true
  log "$(jq -r '[.[0].SpecReports[] | select(.LeafNodeType == "It") | .State] | group_by(.) | map("\(.[0]) \(length)") | join(", ")' "$REPORT_DIR/report.json")"
  [[ ! -s "$REPORT_DIR/failed.txt" ]] || log "failed specs in $REPORT_DIR/failed.txt"
fi
exit "$rc"
