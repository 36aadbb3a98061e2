# kubectl logs, logs -f and logs --previous. Sourced by scripts/k8s/e2e.sh.

SCENARIOS+=("logs scn_logs" "logs-follow scn_logs_follow" "logs-previous scn_logs_previous")

counter_pod() {
  pod_header counter
  cat <<EOF
  containers:
  - name: main
    image: $BUSYBOX
    command: [sh, -c, 'i=0; while true; do echo "line \$i"; i=\$((i+1)); sleep 0.5; done']
EOF
}

scn_logs() {
  ensure_pod counter counter_pod
  wait_until 20 eval 'kubectl logs counter | grep -x "line 1" >/dev/null' ||
    fail "kubectl logs shows no 'line 1': $(kubectl logs counter 2>&1 | head -c 200)"
  # Container log lines hold only the text: no CRI timestamps or tags leak.
  local lines
  lines="$(kubectl logs counter --tail=3)"
  if grep -qvx 'line [0-9]*' <<<"$lines"; then
    fail "unexpected log line format: $(tr '\n' '|' <<<"$lines")"
  fi
}

scn_logs_follow() {
  ensure_pod counter counter_pod
  local last out status=0
  last="$(kubectl logs counter --tail=1 | awk '{print $2}')"
  # Bounded: logs -f never ends on its own while the container runs.
  out="$(timeout 6 "${KUBECTL[@]}" logs -f counter --tail=1 2>&1)" || status=$?
  ((status == 124)) || fail "kubectl logs -f ended by itself (status $status): $(head -c 200 <<<"$out")"
  # Lines written after the follow started must have arrived.
  grep -qx "line $((last + 4))" <<<"$out" ||
    fail "logs -f did not stream new lines (last was $last): $(tr '\n' '|' <<<"$out" | head -c 200)"
}

restarter_pod() {
  pod_header restarter
  cat <<EOF
  containers:
  - name: main
    image: $BUSYBOX
    command: [sh, -c, 'echo "run started \$(date +%s%N)"; sleep 1; exit 3']
EOF
}

scn_logs_previous() {
  kubectl get pod restarter >/dev/null 2>&1 || restarter_pod | pod_apply
  wait_until 90 eval '(( $(jpath pod/restarter "{.status.containerStatuses[0].restartCount}" || echo 0) >= 1 ))' ||
    fail "container did not restart within 90 s: $(pod_summary restarter)"
  local code previous
  code="$(jpath pod/restarter '{.status.containerStatuses[0].lastState.terminated.exitCode}')"
  [[ "$code" == 3 ]] || fail "last termination exit code '$code', want 3"
  previous="$(kubectl logs --previous restarter)" || fail "kubectl logs --previous failed: $previous"
  grep -q '^run started [0-9]' <<<"$previous" || fail "logs --previous: '$previous'"
  # Once restarted, the current log is another run's.
  wait_until 30 eval '[[ -n "$(kubectl logs restarter 2>/dev/null)" ]]' || true
  [[ "$(kubectl logs restarter 2>/dev/null)" != "$previous" ]] ||
    fail "logs and logs --previous are the same run: '$previous'"
}
