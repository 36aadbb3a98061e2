#!/usr/bin/env bash
# Inside the guest: critest against a berthd whose cgroup driver is "auto"
# (systemd here). The host compares the JSON report with the guest's
# expected-failures list (the guest has no python). The guest's kernel has
# AppArmor, so its specs run; SELinux's are skipped (no SELinux there).
#
#   critest.sh WORK_DIR BIN_DIR REPORT_FILE
#
# Environment: CRITEST_FOCUS (a regexp: run only those specs),
# CRITEST_TIMEOUT (suite timeout, default 60m: process start-up is 10-50
# times slower under emulation), CRITEST_RUNTIME_HANDLER=NAME=PATH (every
# pod runs under RuntimeClass handler NAME, configured with the OCI runtime
# binary PATH: critest's --runtime-handler, as scripts/critest.sh).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?WORK_DIR}"
bin="${2:?BIN_DIR}"
report="${3:?REPORT_FILE}"
mkdir -p "$work"
export PATH="$bin:$PATH"

BERTH_GUEST_RUNTIME_HANDLER="${CRITEST_RUNTIME_HANDLER:-}" \
  bash "$here/berthd.sh" start "$work" "$bin" || exit 1
trap 'bash "$here/berthd.sh" stop "$work"' EXIT

args=(
  --runtime-endpoint "unix://$work/berth.sock"
  --image-endpoint "unix://$work/berth.sock"
  --ginkgo.skip 'SELinux'
  --ginkgo.timeout "${CRITEST_TIMEOUT:-60m}"
  --ginkgo.json-report "$report"
  --ginkgo.no-color
)
[[ -n "${CRITEST_FOCUS:-}" ]] && args+=(--ginkgo.focus "$CRITEST_FOCUS")
[[ -n "${CRITEST_RUNTIME_HANDLER:-}" ]] && args+=(--runtime-handler "${CRITEST_RUNTIME_HANDLER%%=*}")
echo "guest critest: ${CRITEST_FOCUS:+focus $CRITEST_FOCUS}${CRITEST_RUNTIME_HANDLER:+ handler $CRITEST_RUNTIME_HANDLER}" >&2
(cd "$work" && critest "${args[@]}" >"$work/critest.log" 2>&1)
status=$?
echo "guest critest exited with $status" >&2
grep -E '^(Ran|FAIL|SUCCESS)' "$work/critest.log" | tail -n 5 >&2
[[ -s "$report" ]]
