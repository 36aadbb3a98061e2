# kubectl debug: ephemeral containers sharing a target container's PID
# namespace (KEP-277) on a quiet target, on a target that has run 1000 short
# processes and on one that has restarted, each non-interactive and
# interactive; a missing target; the sysadmin profile; node debugging.
# Sourced by scripts/k8s/e2e.sh.

SCENARIOS+=(
  "debug-target-quiet scn_debug_quiet"
  "debug-target-quiet-interactive scn_debug_quiet_interactive"
  "debug-target-busy scn_debug_busy"
  "debug-target-busy-interactive scn_debug_busy_interactive"
  "debug-target-restarted scn_debug_restarted"
  "debug-target-restarted-interactive scn_debug_restarted_interactive"
  "debug-target-missing scn_debug_missing"
  "debug-sysadmin scn_debug_sysadmin"
  "debug-node scn_debug_node"
)

# The debug container's commands: the target's processes, and a file of the
# target's read through its init's root.
DEBUG_CMD='ps; cat /proc/1/root/tmp/marker'

# target_pod NAME SCRIPT [PROBE]: container "app" runs SCRIPT, then sleeps
# as "sleep 36000" (what ps in the debug container must show); /data is an
# emptyDir that outlives container restarts. With PROBE, the pod is Ready
# once SCRIPT is done.
target_pod() {
  pod_header "$1"
  cat <<EOF
  containers:
  - name: app
    image: $BUSYBOX
    command: [sh, -c, 'echo $1-marker > /tmp/marker; $2 exec sleep 36000']
    volumeMounts: [{name: data, mountPath: /data}]
EOF
  [[ -z "${3:-}" ]] ||
    echo "    readinessProbe: {exec: {command: [test, -e, /tmp/ready]}, periodSeconds: 1}"
  echo "  volumes: [{name: data, emptyDir: {}}]"
}
# Quiet: nothing runs in the target but its sleep (no exec probe either), so
# the pids in its PID namespace stay low.
quiet_pod() { target_pod debug-quiet ""; }
# fork_loop N: a script forking and reaping N short processes.
fork_loop() { echo "i=0; while [ \$i -lt $1 ]; do /bin/sh -c :; i=\$((i+1)); done;"; }
# Busy: 1000 processes, then the pid of the next one recorded.
busy_pod() {
  target_pod debug-busy "$(fork_loop 1000) /bin/sh -c \"echo \\\$\\\$\" > /tmp/lastpid; touch /tmp/ready;" probe
}
# Restarted: exits on its first run; on the second it starts 200 short
# processes, as a service's start-up scripts do. Pids below about 60 name
# kernel threads on any host, and would hide a pid looked up in the wrong
# /proc; a restarted target with only a few processes would pass by luck.
restarted_pod() {
  target_pod debug-restarted "if [ ! -e /data/once ]; then touch /data/once; exit 1; fi; $(fork_loop 200) touch /tmp/ready;" probe
}

ensure_busy_target() {
  ensure_pod debug-busy busy_pod 180
  local lastpid
  lastpid="$(kubectl exec debug-busy -c app -- cat /tmp/lastpid)"
  ((lastpid > 1000)) || fail "target's pids did not pass 1000 (last $lastpid)"
}

ensure_restarted_target() {
  kubectl get pod debug-restarted >/dev/null 2>&1 || restarted_pod | pod_apply
  wait_until 90 eval '(( $(jpath pod/debug-restarted "{.status.containerStatuses[0].restartCount}" || echo 0) >= 1 ))' ||
    fail "target did not restart within 90 s: $(pod_summary debug-restarted)"
  wait_ready debug-restarted 60
}

# check_debug_output OUTPUT POD: the target's processes and file were seen.
check_debug_output() {
  grep -q 'sleep 36000' <<<"$1" ||
    fail "the debug container does not see the target's processes: $(tr '\n' '|' <<<"$1" | head -c 300)"
  grep -qx "$2-marker" <<<"$1" ||
    fail "the debug container cannot read /proc/1/root/tmp/marker: $(tr '\n' '|' <<<"$1" | tail -c 300)"
}

# debug_noninteractive POD CONTAINER: kubectl debug --target without -it;
# the debug container must start at the first attempt and see the target.
debug_noninteractive() {
  local pod="$1" name="$2" state events out
  kubectl debug "$pod" --image="$BUSYBOX" --target=app -c "$name" -- sh -c "$DEBUG_CMD" >/dev/null
  state="$(wait_state "$pod" "$name" '^terminated|^waiting/(CreateContainerError|RunContainerError|ErrImagePull|ImagePullBackOff|CrashLoopBackOff)' 90)" ||
    fail "debug container $name not done within 90 s: $state"
  [[ "$state" == terminated/0 ]] || fail "debug container $name: $state"
  events="$(failed_events "$pod" "$name")"
  [[ -z "$events" ]] || fail "debug container $name failed before it ran: $(head -n 3 <<<"$events" | tr '\n' '|')"
  out="$(kubectl logs "$pod" -c "$name")"
  echo "$out"
  check_debug_output "$out" "$pod"
}

# debug_interactive POD CONTAINER: kubectl debug -it --target with a shell.
debug_interactive() {
  local pod="$1" name="$2" out status=0
  # kubectl waits for the container forever, printing its waiting message.
  out="$(PTY_ABORT="container $name: " in_pty 120 "$DEBUG_CMD; exit 0\n" \
    "${KUBECTL[@]}" debug -it "$pod" --image="$BUSYBOX" --target=app -c "$name" -- sh)" || status=$?
  echo "$out"
  # kubectl prints the container's waiting message as a colored warning.
  out="$(sed 's/\x1b\[[0-9;]*m//g' <<<"$out")"
  ((status == 0)) || fail "kubectl debug -it exited $status: $(grep -m1 -o "container $name: .*" <<<"$out" || tail -c 300 <<<"$out" | tr '\n' '|')"
  check_debug_output "$out" "$pod"
}

scn_debug_quiet() {
  ensure_pod debug-quiet quiet_pod
  debug_noninteractive debug-quiet dbg-quiet
}
scn_debug_quiet_interactive() {
  ensure_pod debug-quiet quiet_pod
  debug_interactive debug-quiet dbg-quiet-it
}
scn_debug_busy() {
  ensure_busy_target
  debug_noninteractive debug-busy dbg-busy
}
scn_debug_busy_interactive() {
  ensure_busy_target
  debug_interactive debug-busy dbg-busy-it
}
scn_debug_restarted() {
  ensure_restarted_target
  debug_noninteractive debug-restarted dbg-restarted
}
scn_debug_restarted_interactive() {
  ensure_restarted_target
  debug_interactive debug-restarted dbg-restarted-it
}

# The API server refuses an ephemeral container whose target does not exist.
scn_debug_missing() {
  ensure_pod debug-quiet quiet_pod
  local out
  if out="$(kubectl debug debug-quiet --image="$BUSYBOX" --target=no-such-container -c dbg-missing -- true 2>&1)"; then
    fail "kubectl debug with a missing target succeeded: $out"
  fi
  echo "$out"
  grep -q 'targetContainerName' <<<"$out" ||
    fail "refused, but not for the target: $(head -c 300 <<<"$out")"
  [[ "$(container_state debug-quiet dbg-missing)" == absent ]] ||
    fail "an ephemeral container was added for a missing target"
}

# --profile=sysadmin makes the debug container privileged: CAP_SYS_ADMIN
# (bit 21) is in its effective set, which no default container has.
scn_debug_sysadmin() {
  ensure_pod debug-quiet quiet_pod
  local state out capeff
  kubectl debug debug-quiet --image="$BUSYBOX" --target=app --profile=sysadmin -c dbg-sysadmin \
    -- sh -c "grep CapEff /proc/self/status; $DEBUG_CMD" >/dev/null
  state="$(wait_state debug-quiet dbg-sysadmin '^terminated|^waiting/(CreateContainerError|RunContainerError)' 90)" ||
    fail "sysadmin debug container not done within 90 s: $state"
  [[ "$state" == terminated/0 ]] || fail "sysadmin debug container: $state"
  out="$(kubectl logs debug-quiet -c dbg-sysadmin)"
  echo "$out"
  capeff="$(awk '/^CapEff:/ {print $2}' <<<"$out")"
  [[ -n "$capeff" ]] && (((16#$capeff >> 21) & 1)) ||
    fail "sysadmin debug container is not privileged: CapEff '$capeff'"
  check_debug_output "$out" debug-quiet
}

# kubectl debug node/...: a pod in the host's namespaces with the host's
# root at /host.
scn_debug_node() {
  local out pod marker="node-marker-$RANDOM"
  echo "$marker" >"$WORK/node-marker"
  out="$(kubectl debug "node/$NODE" --image="$BUSYBOX" -- sh -c "cat /host$WORK/node-marker; hostname; ps" 2>&1)"
  echo "$out"
  pod="$(grep -o 'node-debugger-[a-z0-9.-]*' <<<"$out" | head -n1)"
  [[ -n "$pod" ]] || fail "no node debugger pod created: $(head -c 300 <<<"$out")"
  wait_until 90 eval '[[ "$(jpath "pod/$pod" "{.status.phase}")" == Succeeded ]]' ||
    fail "node debugger pod $pod did not succeed: $(pod_summary "$pod")"
  out="$(kubectl logs "$pod")"
  echo "$out"
  kubectl delete pod "$pod" --wait=false >/dev/null
  grep -qx "$marker" <<<"$out" || fail "the host's root is not at /host: $(head -c 200 <<<"$out")"
  grep -qx "$(hostname)" <<<"$out" || fail "not in the host's UTS namespace: $(head -c 200 <<<"$out")"
  grep -q kubelet <<<"$out" || fail "not in the host's PID namespace (no kubelet in ps)"
}
