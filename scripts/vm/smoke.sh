#!/usr/bin/env bash
# Proves the VM harness: boots the guest, checks it is a systemd + cgroup v2
# node, that vm_run returns stdout, stderr and exit status apart, and that
# the share is readable; then stops it. Prints a PASS or FAIL line per check
# and exits non-zero if any failed.
#
#   scripts/vm/smoke.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"

failed=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failed=1
}
# check NAME EXPECTED ACTUAL
check() {
  if [[ "$3" == "$2" ]]; then pass "$1 = $3"; else fail "$1: expected '$2', got '$3'"; fi
}

share="$(mktemp -d /tmp/berth-vm-smoke.XXXXXX)"
trap 'rm -rf "$share"' EXIT
echo "hello from the host $$" >"$share/hello.txt"

t0=$SECONDS
vm_start "$share"
t_image=$((SECONDS - t0))
if ! vm_wait_ready; then
  fail "guest did not become ready"
  exit 1
fi
t_boot=$((SECONDS - t0 - t_image))
pass "guest ready (image check/build ${t_image} s, boot ${t_boot} s)"

check "PID 1" systemd "$(vm_run cat /proc/1/comm)"
check "/sys/fs/cgroup" cgroup2fs "$(vm_run stat -fc %T /sys/fs/cgroup)"
controllers="$(vm_run cat /sys/fs/cgroup/cgroup.controllers)"
if [[ " $controllers " == *" cpu "* && " $controllers " == *" memory "* && " $controllers " == *" pids "* ]]; then
  pass "cgroup controllers: $controllers"
else
  fail "cgroup controllers lack cpu, memory or pids: '$controllers'"
fi
state="$(vm_run systemctl is-system-running --wait || true)"
case "$state" in
running) pass "system state: $state" ;;
degraded)
  pass "system state: $state (failed units below)"
  vm_run systemctl --failed --no-legend || true
  ;;
*) fail "system state: '$state'" ;;
esac
check hostname berth-guest "$(vm_run hostname)"

# The exit status comes back, and stdout and stderr stay apart.
status=0
vm_sh 'exit 3' || status=$?
check "exit status of 'exit 3'" 3 "$status"
errfile="$(mktemp)"
out="$(vm_sh 'echo to-stdout; echo to-stderr >&2' 2>"$errfile")"
err="$(cat "$errfile")"
rm -f "$errfile"
check stdout to-stdout "$out"
check stderr to-stderr "$err"
check "arguments with spaces and quotes" "a b 'c'" "$(vm_run printf '%s' "a b 'c'")"

check "file from the share" "$(cat "$share/hello.txt")" "$(vm_run cat /mnt/share/hello.txt)"
status=0
vm_run touch /mnt/share/written-by-guest 2>/dev/null || status=$?
if ((status != 0)) && [[ ! -e "$share/written-by-guest" ]]; then
  pass "share is read-only in the guest"
else
  fail "the guest could write to the share"
fi
vm_sh 'echo result >"$BERTH_VM_OUT/result.txt"'
check "file written to \$BERTH_VM_OUT" result "$(cat "$(vm_out_dir)/result.txt" 2>/dev/null)"

# Each job runs in a scope of its own, outside the runner's cgroup.
cg="$(vm_run cat /proc/self/cgroup)"
if [[ "$cg" == 0::/system.slice/berth-job-*.scope ]]; then pass "job cgroup: $cg"; else fail "job cgroup: '$cg'"; fi

check "modules overlay, br_netfilter" "br_netfilter overlay" \
  "$(vm_sh 'cut -d" " -f1 /proc/modules | grep -xE "overlay|br_netfilter" | sort | xargs')"
check "net.ipv4.ip_forward" 1 "$(vm_run sysctl -n net.ipv4.ip_forward)"
check "docker-registry enabled at boot" disabled "$(vm_run systemctl is-enabled docker-registry.service || true)"

# Latency of a trivial command, the harness's fixed cost per call.
t1=$(date +%s.%N)
for _ in 1 2 3 4 5; do vm_run true; done
t2=$(date +%s.%N)
echo "INFO: vm_run true: $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", (b - a) / 5 }') s per command"

status=0
BERTH_VM_JOB_TIMEOUT=3 vm_run sleep 60 2>/dev/null || status=$?
check "status of a job past its timeout" 124 "$status"

t3=$SECONDS
vm_stop
pass "guest stopped in $((SECONDS - t3)) s"

if ((failed)); then
  echo "smoke: FAIL"
  exit 1
fi
echo "smoke: PASS"
