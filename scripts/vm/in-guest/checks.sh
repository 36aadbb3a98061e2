#!/usr/bin/env bash
# Sourced by the in-guest check scripts: crictl against the berthd they
# start in WORK_DIR, and the PASS/FAIL lines they print.
#
#   source checks.sh WORK_DIR BIN_DIR CRICTL_TIMEOUT_S
work="${1:?WORK_DIR}"
bin="${2:?BIN_DIR}"
mkdir -p "$work"
export PATH="$bin:$PATH"
sock="unix://$work/berth.sock"
# A config file of its own: crictl warns on stderr about every missing one.
cat >"$work/crictl.yaml" <<YAML
runtime-endpoint: $sock
image-endpoint: $sock
timeout: ${3:?CRICTL_TIMEOUT_S}
YAML
cri() { crictl --config "$work/crictl.yaml" "$@"; }

passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
# check NAME EXPECTED ACTUAL
check() { if [[ "$3" == "$2" ]]; then pass "$1"; else fail "$1" "want '$2', got '$3'"; fi; }
# checks_done NAME: the summary line; fails when any check failed.
checks_done() {
  echo "$1: $passed passed, $failed failed"
  [[ "$failed" == 0 ]]
}
