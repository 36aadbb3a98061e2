#!/usr/bin/env bash
# A local image registry for image tests and critest: Debian's docker-registry
# (distribution 2.8) listening on 127.0.0.1:5000 only.
#
#   scripts/registry.sh start DIR    start it (no-op if it already runs from DIR)
#   scripts/registry.sh stop DIR     stop it (no-op if it does not run)
#   scripts/registry.sh status DIR   exit 0 if it runs from DIR and answers
#
# Everything lives in DIR: config.yml, storage/, registry.pid, registry.log.
# It is stopped by the pid recorded in DIR/registry.pid, never by name.
# Override the address with BERTH_REGISTRY_ADDR (default 127.0.0.1:5000).
set -euo pipefail

ADDR="${BERTH_REGISTRY_ADDR:-127.0.0.1:5000}"
PORT="${ADDR##*:}"

log() { echo "registry: $*" >&2; }
die() {
  echo "registry: error: $*" >&2
  exit 1
}
usage() {
  echo "usage: $0 start|stop|status DIR" >&2
  exit 2
}

[[ $# -eq 2 ]] || usage
CMD="$1"
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"
CONFIG="$DIR/config.yml"
PIDFILE="$DIR/registry.pid"
LOGFILE="$DIR/registry.log"

# shellcheck source=lib/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/process.sh"

# Prints the recorded pid if that process is alive and is our registry.
running_pid() { recorded_pid "$PIDFILE" "serve $CONFIG"; }

answers() {
  curl -fsS -o /dev/null --max-time 2 "http://$ADDR/v2/" 2>/dev/null
}

port_holder() {
  ss -Hltnp "sport = :$PORT" 2>/dev/null
}

write_config() {
  mkdir -p "$DIR/storage"
  cat >"$CONFIG" <<EOF
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $DIR/storage
  cache:
    blobdescriptor: inmemory
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $ADDR
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: false
EOF
}

start() {
  command -v docker-registry >/dev/null ||
    die "docker-registry not found (apt-get install docker-registry; see scripts/install-deps.sh)"
  local pid
  if pid="$(running_pid)"; then
    answers || die "registry (pid $pid) runs but http://$ADDR/v2/ does not answer; see $LOGFILE"
    log "already running (pid $pid) on $ADDR"
    return 0
  fi
  rm -f "$PIDFILE"
  if [[ -n "$(port_holder)" ]]; then
    die "port $PORT is already taken by something else:
$(port_holder)
stop it, or use another address (BERTH_REGISTRY_ADDR)"
  fi

  write_config
  setsid docker-registry serve "$CONFIG" </dev/null >>"$LOGFILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"

  local i
  for ((i = 0; i < 100; i++)); do
    if answers; then
      log "started (pid $pid) on http://$ADDR, storage $DIR/storage"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      die "docker-registry exited at start; last lines of $LOGFILE:
$(tail -n 20 "$LOGFILE")"
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  die "docker-registry did not answer on http://$ADDR/v2/ within 10 s; see $LOGFILE"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    log "not running"
    return 0
  fi
  stop_pid "$pid" docker-registry
  rm -f "$PIDFILE"
  log "stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(running_pid)" && answers; then
    log "running (pid $pid) on http://$ADDR"
    return 0
  fi
  log "not running"
  return 1
}

case "$CMD" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
