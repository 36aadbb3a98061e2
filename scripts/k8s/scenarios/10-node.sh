# The node and a pod with probes. Sourced by scripts/k8s/e2e.sh.

SCENARIOS+=("node-ready scn_node_ready" "pod-probes scn_pod_probes")

scn_node_ready() {
  node_ready || fail "node $NODE is not Ready"
  local runtime
  runtime="$(jpath "node/$NODE" '{.status.nodeInfo.containerRuntimeVersion}')"
  [[ "$runtime" == berth://* ]] || fail "node runtime version is '$runtime', not berth://..."
  kubectl get node "$NODE" -o wide | tee /dev/stderr | grep -q " berth://" ||
    fail "kubectl get node -o wide does not show the berth:// runtime"
  # cgroupDriver is not in kubelet's config: kubelet must take it from berth.
  [[ -n "$KUBELET_CGROUP_DRIVER" ]] ||
    fail "kubelet did not take its cgroup driver from the CRI runtime"
  # berthd's "auto" resolves to what the host runs on: the caller says which.
  local want="${BERTH_K8S_EXPECT_DRIVER:-$CGROUP_DRIVER}"
  [[ "$want" == auto || "$KUBELET_CGROUP_DRIVER" == "$want" ]] ||
    fail "kubelet took cgroup driver '$KUBELET_CGROUP_DRIVER' from the CRI runtime, want '$want'"
}

# web: nginx with HTTP readiness and TCP liveness probes, and a busybox
# sidecar with exec probes. Used by the streaming scenarios too.
web_pod() {
  pod_header web
  cat <<EOF
  containers:
  - name: nginx
    image: $NGINX
    ports: [{containerPort: 80}]
    readinessProbe: {httpGet: {path: /, port: 80}, periodSeconds: 2}
    livenessProbe: {tcpSocket: {port: 80}, periodSeconds: 2}
  - name: sidecar
    image: $BUSYBOX
    command: [sh, -c, 'touch /tmp/ready; exec sleep 36000']
    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 2}
    livenessProbe: {exec: {command: ['true']}, periodSeconds: 2}
EOF
}

scn_pod_probes() {
  ensure_pod web web_pod
  local ready restarts
  ready="$(jpath pod/web '{.status.containerStatuses[*].ready}')"
  [[ "$ready" == "true true" ]] || fail "container readiness is '$ready': $(pod_summary web)"
  # Liveness probes that fail would have restarted a container.
  sleep 6
  restarts="$(jpath pod/web '{.status.containerStatuses[*].restartCount}')"
  [[ "$restarts" == "0 0" ]] || fail "restart counts '$restarts' with passing probes: $(pod_summary web)"
  [[ "$(jpath pod/web '{.status.phase}')" == Running ]] || fail "pod web: $(pod_summary web)"
}
