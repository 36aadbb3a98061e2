# A one-node cluster on loopback for the Kubernetes stage: etcd,
# kube-apiserver, a berthd of its own and kubelet registered as the node. No
# scheduler or controller-manager: pods are created with spec.nodeName.
# Sourced by scripts/k8s/e2e.sh, which sets WORK, K8S_BIN, BERTHD, NODE, NS,
# the *_PORT variables, REGISTRY, CNI_BRIDGE and CNI_SUBNET; the node-density
# bench (scripts/bench/density.sh) also sets RUNTIME_ENDPOINT (kubelet's
# runtime, default berthd's socket) and KUBELET_MAX_PODS.

STARTED_PIDS=() # "pid name" of every process started here, stopped in reverse

log() { echo "k8s-e2e: $*" >&2; }

# started PID NAME: records a process to stop at the end.
started() { STARTED_PIDS+=("$1 $2"); }

# wait_until SECONDS COMMAND...: polls COMMAND every half second.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# alive PID NAME LOG: fails with the log's tail when PID has exited.
alive() {
  kill -0 "$1" 2>/dev/null && return 0
  log "$2 exited at start-up; last lines of $3:"
  tail -n 30 "$3" >&2
  return 1
}

# Tokens, service-account keys and the kubeconfigs of the admin and kubelet.
make_credentials() {
  local dir="$WORK/pki"
  mkdir -p -m 0700 "$dir"
  ADMIN_TOKEN="$(openssl rand -hex 16)"
  local node_token
  node_token="$(openssl rand -hex 16)"
  # token,user,uid,"groups": the admin is a cluster admin by group, the
  # kubelet is a node for the Node authorizer.
  cat >"$dir/tokens.csv" <<EOF
$ADMIN_TOKEN,berth-e2e-admin,berth-e2e-admin,"system:masters"
$node_token,system:node:$NODE,system:node:$NODE,"system:nodes"
EOF
  chmod 0600 "$dir/tokens.csv"
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  # A CA kubelet trusts for client certificates, and the API server's client
  # certificate for kubelet (logs, exec, attach, port-forward), as an admin.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=berth-e2e-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=berth-e2e-apiserver" \
    -keyout "$dir/kubelet-client.key" -out "$dir/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -days 2 -in "$dir/kubelet-client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/kubelet-client.crt" 2>/dev/null
  write_kubeconfig "$WORK/admin.kubeconfig" "$ADMIN_TOKEN" "$NS"
  write_kubeconfig "$WORK/kubelet.kubeconfig" "$node_token" default
}

# write_kubeconfig FILE TOKEN NAMESPACE. The API server's serving certificate
# is self-signed at start-up, hence no CA to check it against.
write_kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: berth-e2e
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    insecure-skip-tls-verify: true
users:
- name: user
  user:
    token: $2
contexts:
- name: berth-e2e
  context: {cluster: berth-e2e, user: user, namespace: $3}
current-context: berth-e2e
EOF
  chmod 0600 "$1"
}

start_etcd() {
  local url="http://127.0.0.1:$ETCD_PORT" peer="http://127.0.0.1:$ETCD_PEER_PORT"
  # A throwaway store: fsync would only slow the stage down on a shared disk.
  "$K8S_BIN/etcd" --name berth-e2e --data-dir "$WORK/etcd" \
    --listen-client-urls "$url" --advertise-client-urls "$url" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "berth-e2e=$peer" --unsafe-no-fsync \
    --log-level warn >"$WORK/logs/etcd.log" 2>&1 &
  started $! etcd
  local pid=$!
  wait_until "$START_TIMEOUT" "$K8S_BIN/etcdctl" --endpoints "$url" endpoint health || {
    alive "$pid" etcd "$WORK/logs/etcd.log"
    log "etcd did not become healthy"
    return 1
  }
}

start_apiserver() {
  # Loopback only; the Node authorizer and RBAC as a real cluster has them.
  # No endpoint reconciler: since 1.37 it refuses a loopback advertise
  # address, and nothing here reaches the API server through its Service.
  # Hostname first in the address types: the node is named after a host name
  # that resolves to loopback, where kubelet listens (a node IP may not be a
  # loopback address).
  local gates=()
  # VolumeBindMountOptions (alpha in 1.37): pods may ask for noexec volumes.
  if ((K8S_MINOR >= 37)); then gates+=(VolumeBindMountOptions=true); fi
  # UserNamespacesHostNetworkSupport (KEP-5607, alpha since 1.35): a pod may
  # have hostUsers: false with hostNetwork: true.
  if ((K8S_MINOR >= 35)); then gates+=(UserNamespacesHostNetworkSupport=true); fi
  local gate_flags=()
  if ((${#gates[@]})); then gate_flags=(--feature-gates "$(IFS=,; echo "${gates[*]}")"); fi
  "$K8S_BIN/kube-apiserver" "${gate_flags[@]}" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --endpoint-reconciler-type none \
    --secure-port "$APISERVER_PORT" --cert-dir "$WORK/apiserver-certs" \
    --token-auth-file "$WORK/pki/tokens.csv" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$WORK/pki/sa.pub" \
    --service-account-signing-key-file "$WORK/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/24 \
    --allow-privileged=true \
    --kubelet-preferred-address-types Hostname,InternalIP \
    --kubelet-client-certificate "$WORK/pki/kubelet-client.crt" \
    --kubelet-client-key "$WORK/pki/kubelet-client.key" \
    --v 1 >"$WORK/logs/kube-apiserver.log" 2>&1 &
  started $! kube-apiserver
  local pid=$!
  wait_until "$START_TIMEOUT" kubectl get --raw /readyz || {
    alive "$pid" kube-apiserver "$WORK/logs/kube-apiserver.log"
    log "kube-apiserver not ready within $START_TIMEOUT s"
    return 1
  }
  # No controller-manager creates the namespace's default service account;
  # without a token to mount, pods need no kube-root-ca.crt either.
  kubectl create namespace "$NS" >/dev/null
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: $NS}
automountServiceAccountToken: false
EOF
}

start_berthd() {
  mkdir -p "$WORK/net.d"
  write_bridge_network "$WORK/net.d/10-berth-k8s.conflist" berth-k8s "$CNI_BRIDGE" \
    "$CNI_SUBNET" "$WORK/cni-ipam"
  # Checkpoint images come back as pods here (80-checkpoint.sh).
  echo 'allow_checkpoint_images = true' >"$WORK/berthd.toml"
  # The RuntimeClass handler "runc" (runtime-class-runc scenario).
  write_berthd_config "$WORK/berthd.toml.tables" "$CGROUP_DRIVER" "$WORK/net.d" "$REGISTRY" \
    "[stream]\naddress = \"127.0.0.1\"${RUNC:+\n[runtime_handlers.runc]\nruntime_path = \"$RUNC\"}"
  cat "$WORK/berthd.toml.tables" >>"$WORK/berthd.toml"
  # The state dir on a tmpfs of its own, as /run is on a node (shims then
  # create containers in a trimmed mount table); cleanup unmounts it.
  state_tmpfs "$WORK/berth-state"
  "$BERTHD" --config "$WORK/berthd.toml" --listen "$WORK/berth.sock" \
    --root "$WORK/berth-root" --state "$WORK/berth-state" --log-level "${BERTHD_LOG_LEVEL:-debug}" \
    >"$WORK/logs/berthd.log" 2>&1 &
  started $! berthd
  local pid=$!
  wait_until "$START_TIMEOUT" test -S "$WORK/berth.sock" || {
    alive "$pid" berthd "$WORK/logs/berthd.log"
    log "berthd did not create $WORK/berth.sock"
    return 1
  }
}

write_kubelet_config() {
  # cgroupDriver is left out on purpose: kubelet takes it from berth's
  # RuntimeConfig. Callers are authenticated and authorized by the API
  # server (webhook), or by a client certificate from the stage's CA.
  cat >"$WORK/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: ${RUNTIME_ENDPOINT:-unix://$WORK/berth.sock}
$(if [[ -n "${KUBELET_MAX_PODS:-}" ]]; then echo "maxPods: $KUBELET_MAX_PODS"; fi)
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $WORK/pki/ca.crt}
authorization: {mode: Webhook}
featureGates:
  PodAndContainerStatsFromCRI: true
$(if ((K8S_MINOR >= 37)); then echo "  VolumeBindMountOptions: true"; fi)
$(if ((K8S_MINOR >= 35)); then echo "  UserNamespacesHostNetworkSupport: true"; fi)
podLogsDir: $WORK/pod-logs
staticPodPath: $WORK/manifests
volumePluginDir: $WORK/volume-plugins
resolvConf: /etc/resolv.conf
# A shared, loaded machine: evict nothing unless it is really out of room.
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

start_kubelet() {
  write_kubelet_config
  # kubelet's volumes must reach berthd: the root dir is a shared mount
  # before kubelet gets its own mount namespace (see kubelet-ns.sh).
  mkdir -p "$WORK/kubelet" "$WORK/pod-logs" "$WORK/manifests"
  mount --bind "$WORK/kubelet" "$WORK/kubelet"
  mount --make-rshared "$WORK/kubelet"
  # The mount point kubelet-ns.sh covers; removed at the end if made here.
  if [[ ! -e /var/lib/kubelet ]]; then
    mkdir /var/lib/kubelet
    touch "$WORK/made-var-lib-kubelet"
  fi
  unshare --mount --propagation unchanged \
    bash "$K8S_LIB/kubelet-ns.sh" "$WORK" \
    "$K8S_BIN/kubelet" --config "$WORK/kubelet.yaml" \
    --kubeconfig "$WORK/kubelet.kubeconfig" --root-dir "$WORK/kubelet" \
    --cert-dir "$WORK/kubelet/pki" \
    --hostname-override "$NODE" ${NODE_IP:+--node-ip "$NODE_IP"} \
    --v 2 >"$WORK/logs/kubelet.log" 2>&1 &
  started $! kubelet
  local pid=$!
  # unshare and kubelet-ns.sh exec: this is kubelet's pid (e2e.sh's summary).
  KUBELET_PID=$pid
  wait_until "$START_TIMEOUT" node_ready || {
    alive "$pid" kubelet "$WORK/logs/kubelet.log"
    log "node $NODE not Ready within $START_TIMEOUT s; kubelet log tail:"
    tail -n 30 "$WORK/logs/kubelet.log" >&2
    return 1
  }
  # What kubelet took from berth's RuntimeConfig (its config names none).
  KUBELET_CGROUP_DRIVER="$(sed -n 's/.*received from the CRI runtime.*cgroupDriver="\([a-z]*\)".*/\1/p' \
    "$WORK/logs/kubelet.log" | head -n 1)"
  log "kubelet's cgroup driver, from the CRI runtime: ${KUBELET_CGROUP_DRIVER:-none}"
}

node_ready() {
  [[ "$(kubectl get node "$NODE" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# stop_cluster: everything started here, newest first, by recorded pid.
# Pods and containers outlive kubelet and berthd by design: they are removed
# through berthd after kubelet stops and before berthd does.
stop_cluster() {
  local i pid name
  for ((i = ${#STARTED_PIDS[@]} - 1; i >= 0; i--)); do
    read -r pid name <<<"${STARTED_PIDS[$i]}"
    if [[ "$name" == berthd ]] && kill -0 "$pid" 2>/dev/null; then
      crictl --timeout 60s --runtime-endpoint "unix://$WORK/berth.sock" rmp --all --force >/dev/null 2>&1 ||
        log "crictl rmp --all failed; pods may be left in berthd's state"
    fi
    stop_pid "$pid" "$name"
  done
  STARTED_PIDS=()
}
