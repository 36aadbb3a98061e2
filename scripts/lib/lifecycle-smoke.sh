# lifecycle_smoke SOCKET IMAGE WORK: what an operator does first with a
# berthd they built, through crictl: pull IMAGE, run a pod, create and
# start a container, exec into it, stop and remove both. Prints one line
# per step and fails at the first that does not work. Sourced.
lifecycle_smoke() {
  local socket="$1" image="$2" work="$3" pod ctr out
  mkdir -p "$work"
  cat >"$work/crictl.yaml" <<YAML
runtime-endpoint: unix://$socket
image-endpoint: unix://$socket
timeout: 120
YAML
  local -a cri=(crictl --config "$work/crictl.yaml")
  cat >"$work/pod.json" <<JSON
{"metadata": {"name": "smoke", "namespace": "smoke", "uid": "smoke-uid", "attempt": 0},
 "log_directory": "$work/logs", "linux": {}}
JSON
  cat >"$work/ctr.json" <<JSON
{"metadata": {"name": "smoke"}, "image": {"image": "$image"},
 "command": ["sleep", "3600"], "log_path": "smoke.log", "linux": {}}
JSON
  "${cri[@]}" pull "$image" >/dev/null || return 1
  pod="$("${cri[@]}" runp "$work/pod.json")" || return 1
  echo "lifecycle: pod $pod running"
  ctr="$("${cri[@]}" create "$pod" "$work/ctr.json" "$work/pod.json")" || return 1
  "${cri[@]}" start "$ctr" >/dev/null || return 1
  echo "lifecycle: container $ctr started"
  out="$("${cri[@]}" exec -s "$ctr" echo exec-ok)" || return 1
  [[ "$out" == *exec-ok* ]] || {
    echo "lifecycle: exec printed '$out', not exec-ok" >&2
    return 1
  }
  echo "lifecycle: exec into the container works"
  "${cri[@]}" stop "$ctr" >/dev/null && "${cri[@]}" rm "$ctr" >/dev/null || return 1
  "${cri[@]}" stopp "$pod" >/dev/null && "${cri[@]}" rmp "$pod" >/dev/null || return 1
  [[ -z "$("${cri[@]}" ps -a -q)" && -z "$("${cri[@]}" pods -q)" ]] || {
    echo "lifecycle: containers or pods are left after removal" >&2
    return 1
  }
  echo "lifecycle: container and pod removed"
}
