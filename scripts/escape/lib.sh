# The escape suite's helpers, sourced by suite.sh after it sets $work and
# $socket. Probes (probes/*.sh) define functions named probe_<name>; each
# reports with pass/fail/check, never exits.

ESCAPE_IMAGE="${ESCAPE_IMAGE:-docker.io/berth-test/escape:1}"
mkdir -p "$work"
cat >"$work/crictl.yaml" <<YAML
runtime-endpoint: unix://$socket
image-endpoint: unix://$socket
timeout: 120
YAML
cri() { crictl --config "$work/crictl.yaml" "$@"; }

passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
# check NAME WANT GOT
check() { if [[ "$3" == "$2" ]]; then pass "$1"; else fail "$1" "want '$2', got '$3'"; fi; }

# The pods the probes made, removed at the end.
escape_pods=()

# pod_start NAME [LINUX_JSON]: a pod whose "linux" member is LINUX_JSON
# (default {}); prints its id. Its config is $work/NAME-pod.json.
pod_start() {
  local name="$1" linux="${2:-}" id
  [[ -n "$linux" ]] || linux='{}'
  cat >"$work/$name-pod.json" <<JSON
{"metadata": {"name": "escape-$name", "namespace": "escape", "uid": "escape-$name-uid", "attempt": 0},
 "log_directory": "$work/logs/$name",
 "linux": $linux}
JSON
  id="$(cri runp "$work/$name-pod.json")" || return 1
  escape_pods+=("$id")
  echo "$id"
}

# ctr_start POD NAME [EXTRA_JSON]: a container running `sleep 3600` in the
# pod made by pod_start POD; EXTRA_JSON's members are merged (deeply) into
# its config, e.g. '{"linux": {"security_context": {"privileged": true}}}'
# (a privileged container needs a privileged pod). Prints its id.
ctr_start() {
  local pod="$1" name="$2" extra="${3:-}" pod_id id
  [[ -n "$extra" ]] || extra='{}'
  pod_id="$(cri pods -q --name "^escape-$pod\$")" || return 1
  python3 - "$work/$name-ctr.json" "$ESCAPE_IMAGE" "$name" "$extra" <<'PY' || return 1
import json, sys
path, image, name, extra = sys.argv[1:]
config = {"metadata": {"name": name}, "image": {"image": image},
          "command": ["sleep", "3600"], "log_path": name + ".log", "linux": {}}
def merge(into, more):
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
merge(config, json.loads(extra))
json.dump(config, open(path, "w"))
PY
  id="$(cri create "$pod_id" "$work/$name-ctr.json" "$work/$pod-pod.json")" || return 1
  cri start "$id" >/dev/null || return 1
  echo "$id"
}

# in_ctr ID CMD...: runs CMD in the container; prints its output (stdout
# and stderr) and "exit: N" (crictl prints nothing of a command that
# failed, so the status is carried in the output).
in_ctr() {
  local id="$1"
  shift
  cri exec -s "$id" sh -c '"$@" 2>&1; s=$?; echo; echo "exit: $s"' sh "$@" 2>&1
}

# ctr_ok ID CMD...: whether CMD exited 0 in the container.
ctr_ok() {
  in_ctr "$@" | awk 'NF {last = $0} END {exit !(last == "exit: 0")}'
}

# ctr_says ID CMD...: what CMD printed in the container, nothing more
# (crictl may end the output with a blank line of its own).
ctr_says() {
  in_ctr "$@" | awk '{line[NR] = $0}
    END {
      n = NR
      while (n > 0 && line[n] == "") n--
      if (n > 0 && line[n] ~ /^exit: /) n--
      if (n > 0 && line[n] == "") n--
      for (i = 1; i <= n; i++) print line[i]
    }'
}

# printed OUTPUT KEY: the value escape-probe printed for KEY ("open",
# "mknod").
printed() { awk -F': ' -v k="$2" '$1 == k {print $2}' <<<"$1"; }

escape_setup() {
  cri pull "$ESCAPE_IMAGE" >/dev/null || return 1
  pod_start default >/dev/null || return 1
}

escape_teardown() {
  local id
  for id in "${escape_pods[@]}"; do
    cri stopp "$id" >/dev/null 2>&1
    cri rmp "$id" >/dev/null 2>&1
  done
}
