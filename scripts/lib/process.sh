# Helpers for the processes the scripts start. They act only on pids the
# scripts recorded themselves, never on processes found by name.

# recorded_pid PIDFILE PATTERN: prints the pid in PIDFILE if that process is
# alive and its command line contains PATTERN (so a recycled pid is never
# taken for ours).
recorded_pid() {
  local pidfile="$1" pattern="$2" pid cmdline
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *"$pattern"* ]] || return 1
  printf '%s\n' "$pid"
}

# stop_pid PID [NAME]: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
  local pid="$1" name="${2:-process}" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "$name (pid $pid) did not stop on SIGTERM; sending SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
}
