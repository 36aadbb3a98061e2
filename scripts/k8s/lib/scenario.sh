# Scenario runner and the helpers scenarios share. Sourced by
# scripts/k8s/e2e.sh after lib/cluster.sh.
#
# A scenario is a function run in a subshell with errexit: the first failing
# command fails it, and `fail REASON` fails it with a reason of its own.
# Each prints exactly one line, `PASS <name>` or `FAIL <name>: <reason>`.

PASSED=0
FAILED=0
BUSYBOX="registry.k8s.io/e2e-test-images/busybox:1.29-2"
NGINX="registry.k8s.io/e2e-test-images/nginx:1.14-2"

# scenario NAME FUNCTION: runs FUNCTION unless BERTH_K8S_FOCUS leaves NAME out.
scenario() {
  local name="$1" fn="$2"
  if [[ -n "${BERTH_K8S_FOCUS:-}" && ! "$name" =~ $BERTH_K8S_FOCUS ]]; then
    return 0
  fi
  local dir="$WORK/scenarios" start=$SECONDS status
  mkdir -p "$dir"
  export SCENARIO_REASON="$dir/$name.reason"
  rm -f "$SCENARIO_REASON"
  set +e
  (
    set -eEo pipefail
    trap 'scenario_err "$?" "$BASH_COMMAND" "${BASH_SOURCE[0]##*/}:$LINENO"' ERR
    "$fn"
  ) >"$dir/$name.log" 2>&1 </dev/null
  status=$?
  set -e
  if ((status == 0)); then
    echo "PASS $name"
    PASSED=$((PASSED + 1))
  else
    local reason="exit status $status"
    [[ -s "$SCENARIO_REASON" ]] && reason="$(head -c 600 "$SCENARIO_REASON" | tr '\n' ' ' | sed 's/ *$//')"
    echo "FAIL $name: $reason"
    FAILED=$((FAILED + 1))
    # The run's output is often all there is (CI, the guest): its tail too.
    sed "s/^/  $name| /" "$dir/$name.log" | tail -n 12 >&2
  fi
  log "$name took $((SECONDS - start)) s (log: $dir/$name.log)"
}

scenario_err() {
  [[ -s "$SCENARIO_REASON" ]] || echo "$3: \`$2\` exited $1" >"$SCENARIO_REASON"
}

# fail REASON: ends the scenario with REASON.
fail() {
  echo "$*" >"$SCENARIO_REASON"
  echo "FAIL: $*"
  exit 1
}

# jpath OBJECT JSONPATH: one field of an API object.
jpath() { kubectl get "$1" -o "jsonpath=$2"; }

# pod_header NAME: the start of a pod manifest, bound to the node (no
# scheduler runs) with a short grace period.
pod_header() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  nodeName: $NODE
  terminationGracePeriodSeconds: 5
EOF
}

# pod_apply <<YAML: creates (or updates) a pod from stdin.
pod_apply() {
  kubectl apply -f - >/dev/null
}

# pod_summary POD: phase and container states, for failure reasons.
pod_summary() {
  kubectl get pod "$1" -o json 2>/dev/null | jq -r '
    [.status.phase // "?"] + [(.status.containerStatuses // []) + (.status.ephemeralContainerStatuses // [])
     | .[] | "\(.name)=" + (.state | to_entries[0] | "\(.key)" +
       (if .value.reason then "/\(.value.reason)" else "" end) +
       (if .value.message then " (\(.value.message))" else "" end))]
    | join(" ")' | head -c 500
}

# wait_ready POD [SECONDS]: the pod Ready, or fail with its state.
wait_ready() {
  kubectl wait --for=condition=Ready "pod/$1" --timeout="${2:-90}s" >/dev/null 2>&1 ||
    fail "pod $1 not Ready within ${2:-90} s: $(pod_summary "$1")"
}

# ensure_pod POD MANIFEST_FUNCTION: creates POD from the function's YAML
# unless it runs already (scenarios share pods, yet each runs alone too).
ensure_pod() {
  if ! kubectl get pod "$1" >/dev/null 2>&1; then
    "$2" | pod_apply
  fi
  wait_ready "$1" "${3:-90}"
}

# container_state POD CONTAINER: running, waiting/<reason>, terminated/<code>.
container_state() {
  kubectl get pod "$1" -o json | jq -r --arg c "$2" '
    [(.status.containerStatuses // []) + (.status.ephemeralContainerStatuses // []) | .[] | select(.name == $c)][0]
    | if . == null then "absent"
      elif .state.running then "running"
      elif .state.terminated then "terminated/\(.state.terminated.exitCode)"
      else "waiting/\(.state.waiting.reason // "")" +
        (if .state.waiting.message then ": \(.state.waiting.message)" else "" end) end'
}

# wait_state POD CONTAINER REGEXP SECONDS: until the container's state
# matches; prints the state reached.
wait_state() {
  local deadline=$((SECONDS + $4)) state
  while :; do
    state="$(container_state "$1" "$2" 2>/dev/null || echo unknown)"
    [[ "$state" =~ $3 ]] && { echo "$state"; return 0; }
    ((SECONDS < deadline)) || { echo "$state"; return 1; }
    sleep 0.5
  done
}

# failed_events POD CONTAINER: kubelet's Failed events for one container
# ("Error: <runtime's message>"), one per line.
failed_events() {
  kubectl get events --field-selector "involvedObject.name=$1,reason=Failed" -o json |
    jq -r --arg c "$2" '.items[] | select(.involvedObject.fieldPath // "" | test("\\{" + $c + "\\}$"))
      | "\(.count)x \(.message)"'
}

# in_pty TIMEOUT INPUT COMMAND...: runs COMMAND with a terminal (40 rows,
# 100 columns) as kubectl -it needs, typing INPUT into it; prints what the
# terminal showed and exits with COMMAND's status.
in_pty() {
  python3 "$K8S_LIB/pty_run.py" "$@"
}

# stream_until PATTERN SECONDS INPUT COMMAND...: runs COMMAND (an exec'able
# one) in the background with INPUT (printf %b) on its stdin, kept open, until
# its output matches PATTERN (grep -E) or SECONDS pass; then stops it.
# Prints the output; fails when PATTERN never showed.
stream_until() {
  local pattern="$1" seconds="$2" input="$3" out fifo pid writer deadline
  shift 3
  out="$(mktemp -p "$WORK")"
  fifo="$out.in"
  mkfifo "$fifo"
  timeout "$seconds" "$@" <"$fifo" >"$out" 2>&1 &
  pid=$!
  exec {writer}>"$fifo"
  printf '%b' "$input" >&"$writer"
  deadline=$((SECONDS + seconds))
  until grep -qE "$pattern" "$out" || ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); do
    sleep 0.3
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  exec {writer}>&-
  cat "$out"
  local status=0
  grep -qE "$pattern" "$out" || status=1
  rm -f "$fifo" "$out"
  return "$status"
}
