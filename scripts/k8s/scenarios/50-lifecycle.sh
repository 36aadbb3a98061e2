# In-place resize, graceful deletion, exit codes and host ports. Sourced by
# scripts/k8s/e2e.sh.

SCENARIOS+=(
  "resize scn_resize" "graceful-delete scn_graceful_delete"
  "exit-code scn_exit_code" "host-port scn_host_port"
)

resize_pod() {
  pod_header resize
  cat <<EOF
  containers:
  - name: app
    image: $BUSYBOX
    command: [sleep, "36000"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: 200m, memory: 128Mi}
EOF
}

# container_cgroup POD CONTROLLER: the container's cgroup directory on the
# host (kubelet's cgroupfs layout; berth names it after the container id).
container_cgroup() {
  local id
  id="$(jpath "pod/$1" '{.status.containerStatuses[0].containerID}')"
  id="${id#berth://}"
  [[ -n "$id" ]] || return 1
  find "/sys/fs/cgroup/$2/kubepods" -type d -name "*$id*" | head -n1
}

# cgroup_values POD: "quota shares memory-limit" of the container's cgroup.
cgroup_values() {
  local cpu mem
  cpu="$(container_cgroup "$1" cpu)" && mem="$(container_cgroup "$1" memory)" || return 1
  [[ -n "$cpu" && -n "$mem" ]] || return 1
  echo "$(cat "$cpu/cpu.cfs_quota_us") $(cat "$cpu/cpu.shares") $(cat "$mem/memory.limit_in_bytes")"
}

scn_resize() {
  ensure_pod resize resize_pod
  local before after status_res
  before="$(cgroup_values resize)" || fail "no cgroup found for the container"
  # 200m = 20 ms per 100 ms period; 100m requests = 102 shares; 128 MiB.
  [[ "$before" == "20000 102 134217728" ]] || fail "cgroup before resize: $before"
  kubectl patch pod resize --subresource resize --patch \
    '{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m","memory":"64Mi"},"limits":{"cpu":"300m","memory":"256Mi"}}}]}}' >/dev/null
  # 300m = 30 ms per period; 150m = 153 shares; 256 MiB.
  wait_until 60 eval '[[ "$(cgroup_values resize)" == "30000 153 268435456" ]]' ||
    fail "cgroup after resize: $(cgroup_values resize), want 30000 153 268435456; $(kubectl get pod resize -o jsonpath='{.status.conditions}')"
  wait_until 60 eval '[[ "$(jpath pod/resize "{.status.containerStatuses[0].resources.limits.cpu} {.status.containerStatuses[0].resources.limits.memory} {.status.containerStatuses[0].resources.requests.cpu}")" == "300m 256Mi 150m" ]]' ||
    fail "pod status resources: $(jpath pod/resize '{.status.containerStatuses[0].resources}')"
  # No resize left pending or in progress.
  wait_until 30 eval '! kubectl get pod resize -o jsonpath="{.status.conditions[*].type}" | grep -q PodResize' ||
    fail "resize conditions remain: $(jpath pod/resize '{.status.conditions}')"
  [[ "$(jpath pod/resize '{.status.containerStatuses[0].restartCount}')" == 0 ]] ||
    fail "the container restarted to resize (resizePolicy NotRequired)"
}

# graceful: a TERM trap writes a marker into a hostPath directory.
graceful_pod() {
  pod_header graceful | sed 's/terminationGracePeriodSeconds: 5/terminationGracePeriodSeconds: 60/'
  cat <<EOF
  containers:
  - name: app
    image: $BUSYBOX
    command: [sh, -c, 'trap "echo sigterm-handled > /out/marker; exit 0" TERM; echo started; while true; do sleep 1 & wait \$!; done']
    volumeMounts: [{name: out, mountPath: /out}]
  volumes: [{name: out, hostPath: {path: $WORK/graceful, type: DirectoryOrCreate}}]
EOF
}

scn_graceful_delete() {
  rm -f "$WORK/graceful/marker"
  ensure_pod graceful graceful_pod
  local start=$SECONDS
  kubectl delete pod graceful --wait=false >/dev/null
  wait_until 30 test -s "$WORK/graceful/marker" ||
    fail "no marker from the TERM trap within 30 s: $(pod_summary graceful)"
  grep -qx sigterm-handled "$WORK/graceful/marker" || fail "marker: $(cat "$WORK/graceful/marker")"
  kubectl wait --for=delete pod/graceful --timeout=50s >/dev/null 2>&1 ||
    fail "pod not gone within 50 s of the deletion: $(pod_summary graceful)"
  # Gone well before the 60 s grace period: the container exited on TERM,
  # it was not killed at the end of the period.
  ((SECONDS - start < 45)) || fail "deletion took $((SECONDS - start)) s of a 60 s grace period"
}

exit7_pod() {
  pod_header exit7
  cat <<EOF
  restartPolicy: Never
  containers:
  - name: app
    image: $BUSYBOX
    command: [sh, -c, 'echo exiting; exit 7']
EOF
}

scn_exit_code() {
  kubectl get pod exit7 >/dev/null 2>&1 || exit7_pod | pod_apply
  wait_until 60 eval '[[ "$(jpath pod/exit7 "{.status.phase}")" == Failed ]]' ||
    fail "pod phase not Failed within 60 s: $(pod_summary exit7)"
  local code
  code="$(jpath pod/exit7 '{.status.containerStatuses[0].state.terminated.exitCode}')"
  [[ "$code" == 7 ]] || fail "exit code '$code', want 7: $(pod_summary exit7)"
  [[ "$(kubectl logs exit7)" == exiting ]] || fail "log: $(kubectl logs exit7 2>&1 | head -c 200)"
}

hostport_pod() {
  pod_header hostport
  cat <<EOF
  containers:
  - name: nginx
    image: $NGINX
    ports: [{containerPort: 80, hostPort: $HOST_PORT, hostIP: 127.0.0.1}]
    readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 2}
EOF
}

scn_host_port() {
  ensure_pod hostport hostport_pod
  local body
  body="$(curl -fsS --max-time 10 "http://127.0.0.1:$HOST_PORT/" 2>&1)" ||
    fail "http://127.0.0.1:$HOST_PORT/: $body"
  grep -q 'Welcome to nginx' <<<"$body" || fail "unexpected answer: $(head -c 200 <<<"$body")"
}
