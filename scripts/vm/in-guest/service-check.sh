#!/usr/bin/env bash
# Inside the guest (systemd, cgroup v2): berth installed as an operator
# does, with scripts/install.sh from the shared binaries, and run as its
# systemd unit:
#
#   - the unit is active, berthd told systemd it is ready (Type=notify) and
#     runs at OOMScoreAdjust -999 with its open-file limit raised;
#   - crictl reaches it through the /etc/crictl.yaml install wrote, and
#     `crictl info` names the cgroup driver in use (systemd);
#   - `systemctl reload berthd` (SIGHUP) keeps the same berthd process and
#     applies a changed mirror: first a mirror that does not exist (the pull
#     fails naming it), then the guest's registry (the pull works);
#   - a pod and a container run; `systemctl restart berthd` keeps them: the
#     same ids, still running, attempt 0, the same container process;
#   - scripts/uninstall.sh --purge leaves no berth file, unit, process,
#     mount or cgroup.
#
# Prints one PASS/FAIL line per check and a summary; non-zero on any FAIL.
#
#   service-check.sh WORK_DIR BIN_DIR SCRIPTS_DIR
#   (SCRIPTS_DIR holds install.sh and uninstall.sh; its parent contrib/)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=checks.sh
source "$here/checks.sh" "${1:?WORK_DIR}" "${2:?BIN_DIR}" 600
scripts="${3:?SCRIPTS_DIR}"
# crictl as an operator runs it: no flags, /etc/crictl.yaml.
cri() { crictl "$@"; }
image=registry.k8s.io/e2e-test-images/busybox:1.29-2
config=/etc/berth/runtime-config.toml

finish() {
  checks_done service-check
  exit
}
journal() { journalctl -u berthd --no-pager -o cat "$@" | tail -n 8 | cut -c1-300; }
main_pid() { systemctl show -p MainPID --value berthd; }
# set_mirror URL: the config's registry.k8s.io mirror becomes URL.
set_mirror() {
  sed -i '/^# service-check mirror/,$d' "$config"
  printf '# service-check mirror\n[registry.mirrors."registry.k8s.io"]\nendpoints = ["%s"]\n' \
    "$1" >>"$config"
}
# reload: systemctl reload, then waits for the reload's log line.
reload() {
  local before
  before="$(journalctl -u berthd --no-pager -o cat | grep -c 'config reloaded')"
  systemctl reload berthd || return 1
  for _ in $(seq 100); do
    (($(journalctl -u berthd --no-pager -o cat | grep -c 'config reloaded') > before)) && return 0
    sleep 0.2
  done
  return 1
}

# Leftovers of an earlier run of this check.
[[ -f /usr/local/share/berth/install-manifest ]] && bash "$scripts/uninstall.sh" --purge >/dev/null 2>&1

# --- install ---------------------------------------------------------------
# A crictl.yaml of the guest's own stays out of the way (and comes back).
if [[ -e /etc/crictl.yaml ]]; then
  mv /etc/crictl.yaml "$work/crictl.yaml.guest"
  trap 'mv "$work/crictl.yaml.guest" /etc/crictl.yaml' EXIT
fi
start=$SECONDS
if out="$(bash "$scripts/install.sh" --bin-dir "$bin" 2>&1)"; then
  pass "install.sh --bin-dir (in $((SECONDS - start)) s)"
else
  fail "install.sh --bin-dir" "$(tail -n 5 <<<"$out")"
  finish
fi
check "systemctl is-active berthd" active "$(systemctl is-active berthd)"
check "unit is Type=notify" notify "$(systemctl show -p Type --value berthd)"
check "unit KillMode" process "$(systemctl show -p KillMode --value berthd)"
pid="$(main_pid)"
check "berthd oom_score_adj" -999 "$(cat "/proc/$pid/oom_score_adj" 2>/dev/null)"
check "berthd soft open-file limit raised" 1048576 \
  "$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null)"
check "helpers in /usr/local/libexec/berth" "berth-pinns berth-shim" \
  "$(ls /usr/local/libexec/berth 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
grep -q 'berthd serving.*version=.*(commit ' <<<"$(journalctl -u berthd --no-pager -o cat)" &&
  pass "start-up log names the commit" || fail "start-up log names the commit" "$(journal)"
check "crictl through /etc/crictl.yaml" RuntimeReady \
  "$(cri info 2>/dev/null | jq -r '.status.conditions[0].type')"
check "crictl info: the cgroup driver in use" systemd \
  "$(cri info 2>/dev/null | jq -r '.config // .info.config | fromjson? // . | .cgroup_driver')"
check "config default installed verbatim" "" "$(berthd config default | diff - "$config")"

# --- reload: a changed mirror applies, berthd stays -------------------------
set_mirror http://127.0.0.1:5999
reload && pass "reload (mirror to a dead endpoint)" || fail "reload" "$(journal)"
check "same berthd after reload" "$pid" "$(main_pid)"
journalctl -u berthd --no-pager -o cat | grep 'config reloaded' | tail -n 1 | grep -q 'registry.mirrors' &&
  pass "reload log names registry.mirrors" || fail "reload log names registry.mirrors" "$(journal)"
if out="$(cri pull "$image" 2>&1)"; then
  fail "pull through the dead mirror fails" "it worked"
else
  grep -q '127.0.0.1:5999' <<<"$out" && pass "pull through the dead mirror fails naming it" ||
    fail "pull through the dead mirror fails naming it" "$out"
fi
set_mirror http://127.0.0.1:5000
reload && pass "reload (mirror to the guest's registry)" || fail "reload" "$(journal)"
out="$(cri pull "$image" 2>&1)" && pass "pull through the reloaded mirror" ||
  fail "pull through the reloaded mirror" "$out"
echo 'log_level = "warm"' >>"$config"
reload && fail "a bad config is refused" "reloaded" || {
  journalctl -u berthd --no-pager -o cat | grep -q 'reload failed' &&
    pass "a bad config is refused, berthd keeps the old one" ||
    fail "a bad config is refused" "$(journal)"
}
sed -i '/^log_level = "warm"$/d' "$config"
check "berthd still active and the same" "active $pid" "$(systemctl is-active berthd) $(main_pid)"

# --- restart: pods and containers stay ---------------------------------------
cat >"$work/pod.json" <<JSON
{"metadata": {"name": "svc", "namespace": "default", "uid": "svc-uid", "attempt": 0},
 "log_directory": "$work/logs",
 "linux": {"security_context": {"namespace_options": {"network": 2}}}}
JSON
cat >"$work/ctr.json" <<JSON
{"metadata": {"name": "sleeper"}, "image": {"image": "$image"},
 "command": ["sleep", "86400"], "log_path": "sleeper.log",
 "linux": {"resources": {"oom_score_adj": -997}}}
JSON
pod_id="$(cri runp "$work/pod.json")" || { fail "pod runs" "$(journal)"; finish; }
ctr_id="$(cri create "$pod_id" "$work/ctr.json" "$work/pod.json")" &&
  cri start "$ctr_id" >/dev/null || { fail "container runs" "$(journal)"; finish; }
pass "pod and container run"
ctr_pid="$(cri inspect "$ctr_id" | jq -r '.info.pid')"
check "container oom_score_adj as asked (not berthd's -999)" -997 \
  "$(cat "/proc/$ctr_pid/oom_score_adj" 2>/dev/null)"
infra_pid="$(cri inspectp "$pod_id" | jq -r '.info.pid // 0')"
((infra_pid > 0)) && check "infra process oom_score_adj" -998 \
  "$(cat "/proc/$infra_pid/oom_score_adj" 2>/dev/null)"

systemctl restart berthd && pass "systemctl restart berthd" || fail "systemctl restart berthd" "$(journal)"
check "active after restart" active "$(systemctl is-active berthd)"
[[ "$(main_pid)" != "$pid" ]] && pass "a new berthd process" || fail "a new berthd process" "same pid $pid"
check "pod still ready" SANDBOX_READY "$(cri inspectp "$pod_id" 2>/dev/null | jq -r '.status.state')"
check "container still running, attempt 0" "CONTAINER_RUNNING 0" \
  "$(cri inspect "$ctr_id" 2>/dev/null | jq -r '"\(.status.state) \(.status.metadata.attempt)"')"
check "same container process" "$ctr_pid" "$(cri inspect "$ctr_id" 2>/dev/null | jq -r '.info.pid')"
kill -0 "$ctr_pid" 2>/dev/null && pass "container process alive" || fail "container process alive" "$ctr_pid"
check "containers berth lists" "$ctr_id" "$(cri ps -q --no-trunc)"

# --- uninstall --purge -------------------------------------------------------
if out="$(bash "$scripts/uninstall.sh" --purge 2>&1)"; then
  pass "uninstall.sh --purge"
else
  fail "uninstall.sh --purge" "$(tail -n 5 <<<"$out")"
fi
# The config was edited above (the mirror): only --purge removes it.
grep -q "removed /etc/berth/runtime-config.toml (changed since install" <<<"$out" &&
  pass "--purge removes the edited config, saying so" ||
  fail "--purge removes the edited config, saying so" "$out"
left="$(find /usr/local/bin/berthd /usr/local/libexec/berth /usr/local/lib/systemd/system/berthd.service \
  /usr/local/share/berth /etc/berth /etc/crictl.yaml /var/lib/berth /run/berth \
  /etc/systemd/system/multi-user.target.wants/berthd.service 2>/dev/null)"
check "no berth file left" "" "$left"
check "no berthd unit left" "" "$(systemctl list-unit-files 'berthd*' --no-legend 2>/dev/null)"
# berth's own processes by argv[0] or executable (the guest's test runner
# is named berth-vm-runner: not ours).
check "no berth process left" "" "$(for p in /proc/[0-9]*; do
  arg0="$(tr '\0' '\n' 2>/dev/null <"$p/cmdline" | head -n 1)"
  exe="$(readlink "$p/exe" 2>/dev/null)"
  [[ "${arg0##*/}" =~ ^berth(d|-shim|-pinns)$ || "${exe##*/}" =~ ^berth(d|-shim|-pinns)$ ]] &&
    echo "${p#/proc/} $arg0"
done)"
kill -0 "$ctr_pid" 2>/dev/null && fail "the container process is gone" "$ctr_pid alive" ||
  pass "the container process is gone"
check "no berth mount left" "" "$(grep -E '/run/berth|/var/lib/berth' /proc/self/mountinfo)"
check "no berth cgroup left" "" "$(find /sys/fs/cgroup -type d -name '*berth*' \
  ! -name 'berth-vm-runner*' ! -name 'berth-job-*' 2>/dev/null)"
finish
