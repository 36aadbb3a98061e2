#!/usr/bin/env bash
# The real-node stage: berth in a systemd + cgroup v2 guest (scripts/vm/),
# where cgroup_driver = "auto" resolves to systemd, as on every current
# Kubernetes node. Boots one guest and runs in it:
#
#   1. node-checks: pods under a kubelet-style slice and under the default
#      parent; containers are berth-<id>.scope units in the pod's slice with
#      their limits in cpu.max/memory.max, see only their own cgroup
#      (/proc/self/cgroup is 0::/), read their memory.max, have crictl stats
#      rows, and are gone with their pod;
#   2. critest v1.36.0 against berthd there, compared on the host with
#      tests/critest-expected-failures-guest.txt.
#
#   scripts/vm/stage.sh [--full]
#
# Under emulation (no KVM here) every process start is 10-50 times slower,
# so by default critest runs the focused subset BERTH_VM_CRITEST_FOCUS
# (default below); --full (or BERTH_VM_CRITEST_FOCUS=all) runs the whole
# suite. Needs the debug build of scripts/test.sh ($CARGO_TARGET_DIR).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"

# The cgroup-relevant part of the suite: sandbox and container lifecycles,
# resources, stats, namespaces and exec, which all go through the driver.
default_focus='PodSandbox|Container runtime should support (basic operations|removing|execSync|listing)|should support (container|pod) stats|NamespaceOption|update container resources|UpdateContainerResources'
focus="${BERTH_VM_CRITEST_FOCUS:-$default_focus}"
[[ "${1:-}" == --full ]] && focus=all

log() { echo "vm-stage: $*" >&2; }

share="$(mktemp -d /tmp/berth-vm-share.XXXXXX)"
cleanup_share() { rm -rf "$share"; }
trap cleanup_share EXIT

log "staging binaries, tools and test images"
bash scripts/vm/share.sh "$share" --profile debug
# The in-guest scripts use the repository's script library.
mkdir -p "$share/scripts"
cp -r scripts/lib scripts/vm "$share/scripts/"

# shellcheck source=lib.sh
source scripts/vm/lib.sh
start=$SECONDS
vm_start "$share"
vm_wait_ready
log "guest up after $((SECONDS - start)) s"
vm_run /mnt/share/load-images.sh >&2

status=0
log "node checks"
vm_run bash /mnt/share/scripts/vm/in-guest/node-checks.sh /root/node /mnt/share/bin || status=1

log "critest in the guest (${focus:0:60}...)"
focus_env=""
[[ "$focus" != all ]] && focus_env="CRITEST_FOCUS='$focus'"
out="$(vm_out_dir)"
vm_sh "$focus_env bash /mnt/share/scripts/vm/in-guest/critest.sh /root/critest /mnt/share/bin \"\$BERTH_VM_OUT/critest-report.json\"" || true
if [[ -s "$out/critest-report.json" ]]; then
  partial=()
  [[ "$focus" != all ]] && partial=(--partial)
  python3 scripts/critest_results.py "$out/critest-report.json" \
    tests/critest-expected-failures-guest.txt "${partial[@]}" || status=1
else
  log "critest wrote no report"
  status=1
fi
vm_stop
log "done in $((SECONDS - start)) s"
exit "$status"
