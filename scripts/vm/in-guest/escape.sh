#!/usr/bin/env bash
# Inside the systemd + cgroup v2 guest: the escape suite
# (scripts/escape/suite.sh) against a berthd with the systemd driver, then
# against one with the cgroupfs driver: device access, for one, is enforced
# by different code under each. Exits non-zero when any probe fails.
#
#   escape.sh WORK_DIR BIN_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
suite="$(cd "$here/../../escape" && pwd)/suite.sh"
work="${1:?usage: escape.sh WORK_DIR BIN_DIR}"
bin="${2:?usage: escape.sh WORK_DIR BIN_DIR}"
export PATH="$bin:$PATH"

# berthd runs from a scratch copy of its binaries on the guest's own disk:
# the share is mounted read-only, which would hide from the runtime binary
# probes whether berthd itself keeps its helpers out of reach.
scratch="$work/bin"
mkdir -p "$scratch"
for binary in berthd berth-shim berth-pinns; do
  cp "$bin/$binary" "$scratch/$binary"
done

status=0
for driver in systemd cgroupfs; do
  dir="$work/$driver"
  BERTH_GUEST_DRIVER="$driver" bash "$here/berthd.sh" start "$dir" "$scratch" || {
    echo "FAIL escape ($driver): berthd did not start"
    status=1
    continue
  }
  ESCAPE_DRIVER="$driver" ESCAPE_STATE_DIRS="$dir/root $dir/state" ESCAPE_BIN_DIR="$scratch" \
    bash "$suite" "$dir/suite" "$dir/berth.sock" || status=1
  bash "$here/berthd.sh" stop "$dir"
done
exit "$status"
