#!/usr/bin/env bash
# Inside the guest: how long an exec into a running container takes under
# emulation, berth against containerd on the same guest, so that a node
# conformance spec bounded by an exec's time (a preStop hook within a grace
# period, a probe within its timeout) can be told berth's from the
# emulation's. One busybox pod per runtime (berth's default, berth's
# RuntimeClass handler runc, containerd 2.4 + runc), its container with a
# process namespace of its own as kubelet makes it, each timed with
# `crictl exec --sync` (the client's start-up is the same for all):
#
#   true     the exec alone;
#   script   five lines of the suite's container script (ExecCommand in
#            test/e2e_node/container_lifecycle_pod_construction.go: each
#            `echo` of `date` and `nmeter` piped through `tee` to the
#            container's stdout), as its preStop hooks and probes run;
#   inside   the same five lines run by nsenter in the container's
#            namespaces, no runtime in the way: what the processes take.
#
# first on the quiet guest, then with two busy loops in system.slice (as
# kubelet, the API server and etcd load a node during the suite).
#
#   exec-timing.sh BIN_DIR CONTAINERD_DIR [ROUNDS]
#
# Prints one line per runtime, load and step: p50 and max of ROUNDS (5)
# in seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
scripts="$(cd "$here/../.." && pwd)"
bin="${1:?BIN_DIR}"
ctrd_bin="${2:?CONTAINERD_DIR}"
rounds="${3:-5}"
export PATH="$bin:$PATH" CRICTL_CONFIG=/dev/null
work=/root/exec-timing
rm -rf "$work"
mkdir -p "$work"
image=registry.k8s.io/e2e-test-images/busybox:1.37.0-1
times="$work/times"

stop_all() {
  systemctl stop berth-exec-hog1 berth-exec-hog2 2>/dev/null || true
  bash "$scripts/vm/in-guest/berthd.sh" stop "$work/berth" >/dev/null 2>&1 || true
  BERTH_CONTAINERD_BIN="$ctrd_bin" bash "$scripts/containerd/stop.sh" "$work/containerd" >/dev/null 2>&1 || true
}
trap stop_all EXIT

BERTH_GUEST_RUNTIME_HANDLER="runc=$bin/runc" \
  bash "$scripts/vm/in-guest/berthd.sh" start "$work/berth" "$bin"
BERTH_REGISTRY=127.0.0.1:5000 BERTH_CONTAINERD_SYSTEMD_CGROUP=1 BERTH_CONTAINERD_BIN="$ctrd_bin" \
  BERTH_CONTAINERD_SANDBOX_IMAGE=registry.k8s.io/pause:3.10.2 \
  bash "$scripts/containerd/start.sh" "$work/containerd" >"$work/containerd-start.log" 2>&1 || {
  tail -n 20 "$work/containerd-start.log" >&2
  exit 1
}

line='echo `date -u +%FT$(nmeter -d0 "%3t" | head -n1)Z` "exec-timing Starting" | tee -a /tmp/exec-timing.log >> /proc/1/fd/1; '
script="$line$line$line$line$line"

now() { date +%s.%N; }
# timed LABEL COMMAND...: appends "LABEL seconds" to $times.
timed() {
  local label="$1" t0 t1
  shift
  t0="$(now)"
  # nmeter's "Broken pipe" when head has its line is no failure; shown
  # only when the command fails.
  "$@" >/dev/null 2>"$work/stderr" || {
    cat "$work/stderr" >&2
    return 1
  }
  t1="$(now)"
  awk -v l="$label" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s %.3f\n", l, b - a }' >>"$times"
}

# measure NAME ENDPOINT HANDLER LOAD
measure() {
  local name="$1" endpoint="$2" handler="$3" load="$4" pod ctr pid i
  local crictl=(crictl --timeout 120s --runtime-endpoint "unix://$endpoint")
  mkdir -p "$work/logs-$name"
  cat >"$work/pod-$name.json" <<EOF
{"metadata": {"name": "exec-timing-$name", "uid": "exec-timing-$name", "namespace": "exec-timing"},
 "log_directory": "$work/logs-$name",
 "linux": {"cgroup_parent": "kubepods-besteffort-podexectiming$name.slice",
           "security_context": {"namespace_options": {"pid": 1}}}}
EOF
  cat >"$work/ctr-$name.json" <<EOF
{"metadata": {"name": "c"}, "image": {"image": "$image"},
 "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"], "log_path": "c.log",
 "linux": {"security_context": {"namespace_options": {"pid": 1}}}}
EOF
  "${crictl[@]}" pull "$image" >/dev/null
  pod="$("${crictl[@]}" runp ${handler:+--runtime "$handler"} "$work/pod-$name.json")"
  ctr="$("${crictl[@]}" create "$pod" "$work/ctr-$name.json" "$work/pod-$name.json")"
  "${crictl[@]}" start "$ctr" >/dev/null
  pid="$("${crictl[@]}" inspect -o go-template --template '{{.info.pid}}' "$ctr")"
  for ((i = 0; i < rounds; i++)); do
    timed "$name $load true" "${crictl[@]}" exec -s "$ctr" true
  done
  for ((i = 0; i < rounds; i++)); do
    timed "$name $load script" "${crictl[@]}" exec -s "$ctr" sh -c "$script"
  done
  for ((i = 0; i < rounds; i++)); do
    timed "$name $load inside" nsenter -t "$pid" -a sh -c "$script"
  done
  "${crictl[@]}" stopp "$pod" >/dev/null
  "${crictl[@]}" rmp "$pod" >/dev/null
}

for load in quiet loaded; do
  if [[ "$load" == loaded ]]; then
    for i in 1 2; do
      systemd-run --unit="berth-exec-hog$i" --quiet sh -c 'while :; do :; done'
    done
  fi
  measure berth "$work/berth/berth.sock" "" "$load"
  measure berth-runc "$work/berth/berth.sock" runc "$load"
  measure containerd "$work/containerd/containerd.sock" "" "$load"
done

echo "exec-timing: runtime, load, step: p50 and max of $rounds (s)"
awk '{ key = $1 " " $2 " " $3; v[key] = v[key] " " $4; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
  END {
    for (i = 1; i <= n; i++) {
      m = split(substr(v[order[i]], 2), a, " ")
      for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++) if (a[y] < a[x]) { t = a[x]; a[x] = a[y]; a[y] = t }
      split(order[i], k, " ")
      printf "%-10s %-6s %-6s p50 %6.2f  max %6.2f\n", k[1], k[2], k[3], a[int((m + 1) / 2)], a[m]
    }
  }' "$times"
