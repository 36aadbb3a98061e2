# exec, attach, port-forward and cp, over WebSocket (kubectl's default) and
# over SPDY (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false,
# KUBECTL_PORT_FORWARD_WEBSOCKETS=false). Sourced by scripts/k8s/e2e.sh.

SCENARIOS+=(
  "exec-websocket scn_exec_websocket" "exec-spdy scn_exec_spdy"
  "exec-tty-websocket scn_exec_tty_websocket" "exec-tty-spdy scn_exec_tty_spdy"
  "attach-websocket scn_attach_websocket" "attach-spdy scn_attach_spdy"
  "port-forward-websocket scn_port_forward_websocket" "port-forward-spdy scn_port_forward_spdy"
  "cp scn_cp"
)

# exec_check: non-interactive exec keeps stdout, stderr and the exit code.
exec_check() {
  ensure_pod web web_pod
  local out status=0
  out="$(timeout 60 "${KUBECTL[@]}" exec web -c sidecar -- sh -c 'echo to-stdout; echo to-stderr >&2; exit 3' 2>&1)" ||
    status=$?
  ((status == 3)) || fail "exit status $status, want 3: $(head -c 300 <<<"$out")"
  grep -qx to-stdout <<<"$out" && grep -qx to-stderr <<<"$out" ||
    fail "output: $(tr '\n' '|' <<<"$out" | head -c 300)"
}
scn_exec_websocket() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true exec_check; }
scn_exec_spdy() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false exec_check; }

# exec_tty_check: exec -it gets a terminal of the client's size, and the
# shell's exit code comes back.
exec_tty_check() {
  ensure_pod web web_pod
  local out status=0
  out="$(in_pty 60 'tty; stty size; exit 5\n' "${KUBECTL[@]}" exec -it web -c sidecar -- sh)" || status=$?
  echo "$out"
  ((status == 5)) || fail "exit status $status, want 5: $(tail -c 300 <<<"$out" | tr '\n' '|')"
  grep -q '^/dev/pts/[0-9]' <<<"$out" || fail "no terminal in the container: $(tr '\n' '|' <<<"$out" | tail -c 300)"
  grep -qx '40 100' <<<"$out" || fail "terminal size is not 40x100: $(tr '\n' '|' <<<"$out" | tail -c 300)"
}
scn_exec_tty_websocket() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true exec_tty_check; }
scn_exec_tty_spdy() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false exec_tty_check; }

# echoer: reads its stdin and answers each line, for attach.
echoer_pod() {
  pod_header echoer
  cat <<EOF
  containers:
  - name: main
    image: $BUSYBOX
    stdin: true
    command: [sh, -c, 'echo echoer-up; while read -r l; do echo "got:\$l"; done']
EOF
}

attach_check() {
  ensure_pod echoer echoer_pod
  local word="hello-$1-$RANDOM" out
  out="$(stream_until "got:$word" 30 "$word\n" "${KUBECTL[@]}" attach -i echoer -c main)" ||
    fail "no 'got:$word' from the attached container: $(tr '\n' '|' <<<"$out" | head -c 300)"
  # Detaching must leave the container running.
  sleep 1
  [[ "$(container_state echoer main)" == running ]] ||
    fail "container not running after detach: $(pod_summary echoer)"
}
scn_attach_websocket() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true attach_check ws; }
scn_attach_spdy() { KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false attach_check spdy; }

# port_forward_check: kubectl picks the local port; nginx answers through it.
port_forward_check() {
  ensure_pod web web_pod
  local out port
  out="$WORK/port-forward.$1"
  timeout 60 "${KUBECTL[@]}" port-forward --address 127.0.0.1 pod/web :80 >"$out" 2>&1 &
  local pid=$!
  wait_until 20 grep -q 'Forwarding from 127.0.0.1:' "$out" || {
    kill "$pid" 2>/dev/null
    fail "port-forward did not start: $(head -c 300 "$out")"
  }
  port="$(sed -n 's/^Forwarding from 127.0.0.1:\([0-9]*\) .*/\1/p' "$out" | head -n1)"
  local body="" i
  # Twice: each request is a new stream in the same session.
  for i in 1 2; do
    body="$(curl -fsS --max-time 10 "http://127.0.0.1:$port/" 2>&1)" || break
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  grep -q 'Welcome to nginx' <<<"$body" ||
    fail "request $i through port-forward: $(head -c 200 <<<"$body"); kubectl: $(tr '\n' '|' <"$out" | head -c 300)"
}
scn_port_forward_websocket() { KUBECTL_PORT_FORWARD_WEBSOCKETS=true port_forward_check ws; }
scn_port_forward_spdy() { KUBECTL_PORT_FORWARD_WEBSOCKETS=false port_forward_check spdy; }

scn_cp() {
  ensure_pod web web_pod
  head -c 1048576 /dev/urandom >"$WORK/cp.in"
  kubectl cp -c sidecar "$WORK/cp.in" web:/tmp/cp.file
  kubectl cp -c sidecar web:/tmp/cp.file "$WORK/cp.out"
  cmp -s "$WORK/cp.in" "$WORK/cp.out" ||
    fail "file copied into the pod and back differs ($(stat -c %s "$WORK/cp.out" 2>/dev/null || echo no) bytes back)"
}
