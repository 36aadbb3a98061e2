# A RuntimeClass whose handler is runc (berthd's [runtime_handlers.runc],
# set by scripts/k8s/lib/cluster.sh when the stage has a runc): its pod's
# container is runc's, as runc's own state says (it lists the container,
# and its init is the container's sleep), and logs, exec and
# kubectl debug --target work in it; with the pod gone, runc's root no
# longer has the container. Sourced by scripts/k8s/e2e.sh.

if [[ -n "$RUNC" ]]; then
  SCENARIOS+=("runtime-class-runc scn_runtime_class_runc")
else
  log "runtime-class-runc left out: no runc (BERTH_K8S_RUNC or BERTH_TEST_RUNC)"
fi

RUNC_POD=runtime-class-runc

runc_pod() {
  pod_header "$RUNC_POD"
  cat <<EOF
  runtimeClassName: berth-runc
  containers:
  - name: app
    image: $BUSYBOX
    command: [sh, -c, 'echo $RUNC_POD-marker > /tmp/marker; echo hello from runc; exec sleep 36000']
EOF
}

# runc_root_lists ID: whether runc's state root for the handler has ID.
runc_root_lists() {
  "$RUNC" --root "$WORK/berth-state/runtimes/runc" list -q 2>/dev/null | grep -qx "$1"
}

scn_runtime_class_runc() {
  local id pid cmdline out
  kubectl apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: berth-runc}
handler: runc
EOF
  ensure_pod "$RUNC_POD" runc_pod
  id="$(jpath "pod/$RUNC_POD" '{.status.containerStatuses[0].containerID}')"
  id="${id#*://}"
  runc_root_lists "$id" ||
    fail "runc's root does not list container $id: $("$RUNC" --root "$WORK/berth-state/runtimes/runc" list 2>&1 | tr '\n' '|' | head -c 300)"
  pid="$("$RUNC" --root "$WORK/berth-state/runtimes/runc" state "$id" | jq -r .pid)"
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmdline" == "sleep 36000 " ]] ||
    fail "runc's init of $id (pid $pid) runs '$cmdline', not the container's sleep"
  echo "runc $("$RUNC" --version | head -n 1) runs $id, init pid $pid: $cmdline"
  wait_until 20 eval 'kubectl logs "$RUNC_POD" | grep -x "hello from runc" >/dev/null' ||
    fail "kubectl logs lacks the container's line: $(kubectl logs "$RUNC_POD" 2>&1 | head -c 200)"
  out="$(kubectl exec "$RUNC_POD" -c app -- cat /tmp/marker)"
  [[ "$out" == "$RUNC_POD-marker" ]] || fail "kubectl exec read '$out'"
  debug_noninteractive "$RUNC_POD" dbg-runc
  kubectl delete pod "$RUNC_POD" --wait=true >/dev/null
  wait_until 60 eval '! runc_root_lists "$id"' ||
    fail "runc's root still lists $id after the pod is gone"
}
