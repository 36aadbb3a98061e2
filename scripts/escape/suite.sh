#!/usr/bin/env bash
# berth's escape suite: a hostile workload against a running berthd. Every
# probe in probes/*.sh tries one way out of a container, as an attacker
# would, and proves reachability harmlessly: it opens and never writes what
# it did not plant (../../shared/SECURITY.md, "How to prove reachability
# harmlessly"). Prints one PASS/FAIL line per probe and
# "escape: N passed, N failed"; exits non-zero on any FAIL.
#
#   scripts/escape/suite.sh WORK_DIR SOCKET
#
# The berthd at SOCKET must reach the image $ESCAPE_IMAGE (default
# docker.io/berth-test/escape:1, pushed by scripts/images/build.sh) and have
# a CNI network. Runners: scripts/escape.sh (this host, cgroupfs) and
# scripts/vm/in-guest/escape.sh (the guest, systemd and cgroupfs).
#
# Environment a probe may read:
#   ESCAPE_DRIVER      the cgroup driver berthd runs with (cgroupfs|systemd)
#   ESCAPE_STATE_DIRS  berthd's root and state dirs, space separated
#   ESCAPE_FOCUS       a regexp: only probes whose name matches run
#   ESCAPE_BIN_DIR     the dir of the berthd under test and its helpers
#                      (berth-shim, berth-pinns)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: suite.sh WORK_DIR SOCKET}"
socket="${2:?usage: suite.sh WORK_DIR SOCKET}"
# shellcheck source=lib.sh
source "$here/lib.sh"
for probes in "$here"/probes/*.sh; do
  # shellcheck disable=SC1090
  source "$probes"
done

escape_setup || {
  echo "escape: setup failed (berthd at $socket, image $ESCAPE_IMAGE)"
  exit 1
}
trap escape_teardown EXIT

while read -r fn; do
  name="${fn#probe_}"
  name="${name//_/-}"
  if [[ -n "${ESCAPE_FOCUS:-}" ]] && ! [[ "$name" =~ $ESCAPE_FOCUS ]]; then
    continue
  fi
  "$fn"
done < <(declare -F | awk '$3 ~ /^probe_/ {print $3}' | sort)

echo "escape (${ESCAPE_DRIVER:-?}): $passed passed, $failed failed"
[[ "$failed" == 0 ]]
