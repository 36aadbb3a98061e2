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
#     fails naming it), then the guest's registry (the pull works); `crictl
#     info` shows the reloaded mirror;
#   - a pod and containers run: one at the oom_score_adj it asks, one created
#     without resources at 0 (not berthd's -999), also for what is exec'd
#     into them; `systemctl restart berthd` keeps them: the same ids, still
#     running, attempt 0, the same container process;
#   - kubelet v1.37 as a systemd unit on berth's socket, standalone, with
#     two static pods (Guaranteed and BestEffort): they run, kubelet takes
#     the systemd driver from berth, kubelet's oom scores reach them;
#     `systemctl reload berthd` applies a changed mirror while they run, and
#     `systemctl restart berthd` keeps them (same pod and container ids and
#     processes, attempt and restartCount 0) with kubelet healthy;
#   - kubelet is stopped and its unit and files removed, then
#     scripts/uninstall.sh --purge leaves no berth file, unit, process,
#     mount or cgroup.
#
# Prints one PASS/FAIL line per check and a summary; non-zero on any FAIL.
#
#   service-check.sh WORK_DIR BIN_DIR SCRIPTS_DIR [K8S_BIN]
#   (SCRIPTS_DIR holds install.sh and uninstall.sh; its parent contrib/;
#   K8S_BIN holds kubelet: without it the kubelet part fails)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=checks.sh
source "$here/checks.sh" "${1:?WORK_DIR}" "${2:?BIN_DIR}" 600
scripts="${3:?SCRIPTS_DIR}"
k8s="${4:-}"
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

# --- kubelet: a standalone kubelet (no API server) as a systemd unit -------
# Its files, all removed by kubelet_leftovers.
kubelet_unit=/etc/systemd/system/kubelet.service
kubelet_files=(/usr/local/bin/kubelet "$kubelet_unit" /etc/kubernetes /var/lib/kubelet
  /var/log/pods /var/log/containers)
# No network card in the guest: a dummy interface holds the node's address.
kubelet_ip=192.0.2.20
kpids=()
kubelet_journal() { journalctl -u kubelet --no-pager -o cat | grep -E '^E[0-9]{4}' | tail -n 8 | cut -c1-300; }
kubelet_healthz() { curl -s --max-time 10 http://127.0.0.1:10248/healthz 2>/dev/null; }
# kubelet_view: one line per static pod's container: its name, pod and
# container ids, state, process, attempt and kubelet's restartCount, and
# its pod's attempt.
kubelet_view() {
  local name id pod
  for name in guaranteed besteffort; do
    id="$(cri ps --name "^$name\$" -q --no-trunc 2>/dev/null | head -n 1)"
    [[ -n "$id" ]] || { echo "$name none"; continue; }
    pod="$(cri inspect "$id" 2>/dev/null | jq -r '.info.sandboxID')"
    echo "$name pod=$pod/$(cri inspectp "$pod" 2>/dev/null | jq -r '"\(.status.state) attempt=\(.status.metadata.attempt)"')" \
      "$(cri inspect "$id" 2>/dev/null | jq -r '"ctr=\(.status.id) \(.status.state) pid=\(.info.pid) attempt=\(.status.metadata.attempt) restartCount=\(.status.annotations["io.kubernetes.container.restartCount"])"')"
  done
}
kubelet_pods_running() {
  [[ "$(kubelet_view | grep -c 'SANDBOX_READY attempt=0 ctr=.* CONTAINER_RUNNING ')" == 2 ]]
}
static_pod() { # NAME QOS-RESOURCES
  cat >"/etc/kubernetes/manifests/$1.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: svc-$1, namespace: default}
spec:
  hostNetwork: true
  containers:
  - name: $1
    image: $image
    command: [sleep, "86400"]
$2
YAML
}

kubelet_part() {
  if [[ -z "$k8s" || ! -x "$k8s/kubelet" ]]; then
    fail "kubelet" "no kubelet binary given (K8S_BIN: ${k8s:-unset})"
    return
  fi
  ip link add berth-svc0 type dummy && ip addr add "$kubelet_ip/32" dev berth-svc0 &&
    ip link set berth-svc0 up
  [[ -e /etc/resolv.conf ]] || { : >/etc/resolv.conf && touch "$work/made-resolv.conf"; }
  install -m 0755 "$k8s/kubelet" /usr/local/bin/kubelet
  mkdir -p /etc/kubernetes/manifests /var/lib/kubelet
  # No API server: no authentication callers but root on this host, on
  # loopback. cgroupDriver is left out: kubelet takes it from berth.
  # syncFrequency 10s: each pod is synced at least that often, so a short
  # wait after the restart covers kubelet's look at every pod.
  cat >/var/lib/kubelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/berth/berth.sock
staticPodPath: /etc/kubernetes/manifests
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
syncFrequency: 10s
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
  static_pod guaranteed '    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 100m, memory: 64Mi}'
  static_pod besteffort ''
  # As a node's kubelet.service, ordered after berthd (Type=notify: kubelet
  # starts once berth's socket serves).
  cat >"$kubelet_unit" <<UNIT
[Unit]
Description=kubelet: The Kubernetes Node Agent (standalone, static pods)
Wants=berthd.service
After=berthd.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml --node-ip=$kubelet_ip --hostname-override=svc-node --v=2
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  local start=$SECONDS
  systemctl start kubelet.service && pass "kubelet.service started" ||
    { fail "kubelet.service started" "$(kubelet_journal)"; return; }
  for _ in $(seq 150); do kubelet_pods_running && break; sleep 2; done
  if kubelet_pods_running; then
    pass "kubelet's static pods run on berth (in $((SECONDS - start)) s)"
  else
    fail "kubelet's static pods run on berth" "$(kubelet_view; kubelet_journal)"
    return
  fi
  check "kubelet healthy" ok "$(kubelet_healthz)"
  journalctl -u kubelet --no-pager -o cat | grep -q 'received from the CRI runtime.*cgroupDriver="systemd"' &&
    pass "kubelet took the systemd cgroup driver from berth" ||
    fail "kubelet took the systemd cgroup driver from berth" "$(kubelet_journal)"
  local view g_pid b_pid
  view="$(kubelet_view)"
  echo "$view" | sed 's/^/  /'
  g_pid="$(sed -n 's/^guaranteed .* pid=\([0-9]*\) .*/\1/p' <<<"$view")"
  b_pid="$(sed -n 's/^besteffort .* pid=\([0-9]*\) .*/\1/p' <<<"$view")"
  kpids=("$g_pid" "$b_pid")
  check "kubelet's scores reach the containers (Guaranteed -997, BestEffort 1000)" "-997 1000" \
    "$(cat "/proc/$g_pid/oom_score_adj" 2>/dev/null) $(cat "/proc/$b_pid/oom_score_adj" 2>/dev/null)"

  # reload while kubelet's pods run: a changed mirror applies.
  set_mirror http://127.0.0.1:5998
  reload && pass "reload with kubelet's pods running" || fail "reload with kubelet's pods running" "$(journal)"
  check "crictl info shows the mirror" http://127.0.0.1:5998 "$(info_mirror)"
  out="$(cri pull registry.k8s.io/e2e-test-images/nginx:1.14-2 2>&1)" &&
    fail "a pull through the new dead mirror fails" "it worked" || {
    grep -q '127.0.0.1:5998' <<<"$out" && pass "a pull through the new dead mirror fails naming it" ||
      fail "a pull through the new dead mirror fails naming it" "$out"
  }
  set_mirror http://127.0.0.1:5000
  reload && out="$(cri pull registry.k8s.io/e2e-test-images/nginx:1.14-2 2>&1)" &&
    pass "reload back to the guest's registry: the pull works" ||
    fail "reload back to the guest's registry: the pull works" "$out $(journal)"
  check "kubelet's pods untouched by the reloads" "$view" "$(kubelet_view)"

  # restart: every container stays, kubelet sees no change.
  local berthd_before kubelet_pid
  berthd_before="$(main_pid)"
  kubelet_pid="$(systemctl show -p MainPID --value kubelet)"
  systemctl restart berthd && pass "systemctl restart berthd under kubelet" ||
    fail "systemctl restart berthd under kubelet" "$(journal)"
  [[ "$(main_pid)" != "$berthd_before" ]] && pass "a new berthd process under kubelet" ||
    fail "a new berthd process under kubelet" "same pid $berthd_before"
  # Two of kubelet's sync periods (and many relists) with the new berthd.
  sleep 25
  check "same pods, containers and processes, attempt and restartCount 0" "$view" "$(kubelet_view)"
  [[ "$(grep -c 'attempt=0 ctr=.* attempt=0 restartCount=0$' <<<"$view")" == 2 ]] &&
    pass "attempt and restartCount 0 before the restart too" ||
    fail "attempt and restartCount 0 before the restart too" "$view"
  check "kubelet still active, the same process, not restarted" "active $kubelet_pid 0" \
    "$(systemctl is-active kubelet) $(systemctl show -p MainPID --value kubelet) $(systemctl show -p NRestarts --value kubelet)"
  check "kubelet healthy after the restart" ok "$(kubelet_healthz)"
  check "kubelet killed no container" "" \
    "$(journalctl -u kubelet --no-pager -o cat | grep -E 'Killing container|Killing unwanted pod' | tail -n 3)"
}

# kubelet_remove: as an operator removes kubelet: stops it, removes its
# unit and files (also after a failed kubelet_part).
kubelet_remove() {
  [[ -e "$kubelet_unit" ]] || return
  systemctl stop kubelet.service
  check "kubelet stopped" inactive "$(systemctl is-active kubelet.service)"
  # Volumes kubelet mounted (none for these pods; never left mounted).
  grep -o ' /var/lib/kubelet[^ ]*' /proc/self/mountinfo | sort -r | xargs -r -n1 umount
  rm -rf /usr/local/bin/kubelet "$kubelet_unit" /etc/kubernetes /var/lib/kubelet
  systemctl daemon-reload
  check "kubelet's unit removed" "" "$(systemctl list-unit-files 'kubelet*' --no-legend 2>/dev/null)"
}

# kubelet_leftovers: what stays of kubelet once berth removed its pods:
# the pod log dirs and kubelet's (empty) slices, stopped as docs/kubeadm.md
# says; the dummy interface.
kubelet_leftovers() {
  systemctl stop kubepods.slice 2>/dev/null
  rm -rf /var/log/pods /var/log/containers
  ip link del berth-svc0 2>/dev/null
  [[ -e "$work/made-resolv.conf" ]] && rm -f /etc/resolv.conf "$work/made-resolv.conf"
}
kubelet_left() {
  ls -d "${kubelet_files[@]}" 2>/dev/null
  systemctl list-units --all --no-legend --plain 'kubelet*' 'kubepods*' 2>/dev/null | awk '{print $1}'
  find /sys/fs/cgroup -maxdepth 1 -name 'kubepods*' 2>/dev/null
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
# crictl info: the config in force, not the one berthd started with.
info_mirror() {
  cri info 2>/dev/null |
    jq -r '.config // .info.config | fromjson? // . | .registry.mirrors["registry.k8s.io"].endpoints[0] // "none"'
}
check "crictl info shows the reloaded mirror" http://127.0.0.1:5999 "$(info_mirror)"
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
check "crictl info shows the mirror reloaded again" http://127.0.0.1:5000 "$(info_mirror)"
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
# No linux.resources at all, as crictl's minimal configs: containerd runs
# such a container at oom_score_adj 0, not at its own score.
cat >"$work/plain.json" <<JSON
{"metadata": {"name": "plain"}, "image": {"image": "$image"},
 "command": ["sleep", "86400"], "log_path": "plain.log"}
JSON
pod_id="$(cri runp "$work/pod.json")" || { fail "pod runs" "$(journal)"; finish; }
ctr_id="$(cri create "$pod_id" "$work/ctr.json" "$work/pod.json")" &&
  cri start "$ctr_id" >/dev/null || { fail "container runs" "$(journal)"; finish; }
plain_id="$(cri create "$pod_id" "$work/plain.json" "$work/pod.json")" &&
  cri start "$plain_id" >/dev/null || { fail "container without resources runs" "$(journal)"; finish; }
pass "pod and containers run"
ctr_pid="$(cri inspect "$ctr_id" | jq -r '.info.pid')"
plain_pid="$(cri inspect "$plain_id" | jq -r '.info.pid')"
check "container oom_score_adj as asked (not berthd's -999)" -997 \
  "$(cat "/proc/$ctr_pid/oom_score_adj" 2>/dev/null)"
check "container without resources at oom_score_adj 0, berthd at -999" "0 -999" \
  "$(cat "/proc/$plain_pid/oom_score_adj" 2>/dev/null) $(cat "/proc/$(main_pid)/oom_score_adj" 2>/dev/null)"
check "exec'd process of the container without resources at 0" 0 \
  "$(cri exec "$plain_id" cat /proc/self/oom_score_adj 2>&1)"
check "exec'd process of the -997 container at -997" -997 \
  "$(cri exec "$ctr_id" cat /proc/self/oom_score_adj 2>&1)"
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
check "same process of the container without resources" "$plain_pid" \
  "$(cri inspect "$plain_id" 2>/dev/null | jq -r '.info.pid')"
check "containers berth lists" "$(sort <<<"$ctr_id"$'\n'"$plain_id")" "$(cri ps -q --no-trunc | sort)"
# kubelet (below) stops every pod it did not create: this one goes first.
cri rmp -f "$pod_id" >/dev/null 2>&1 && pass "the crictl pod removed" ||
  fail "the crictl pod removed" "$(journal)"
kill -0 "$ctr_pid" 2>/dev/null && fail "its container process is gone" "$ctr_pid alive" ||
  pass "its container process is gone"

# --- kubelet as a systemd unit on berth -----------------------------------
kubelet_part
kubelet_remove

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
check "kubelet's container processes are gone" "" \
  "$(for p in "${kpids[@]}"; do kill -0 "$p" 2>/dev/null && echo "$p"; done)"
check "no berth mount left" "" "$(grep -E '/run/berth|/var/lib/berth' /proc/self/mountinfo)"
check "no berth cgroup left" "" "$(find /sys/fs/cgroup -type d -name '*berth*' \
  ! -name 'berth-vm-runner*' ! -name 'berth-job-*' 2>/dev/null)"
kubelet_leftovers
check "no kubelet file, unit or slice left" "" "$(kubelet_left)"
finish
