#!/usr/bin/env bash
# Inside the guest (systemd + cgroup v2, no network card): a kubeadm node on
# berth, as an operator sets one up (docs/kubeadm.md), with everything local.
#
#   - berthd as a systemd unit listening on /run/berth/berth.sock (its
#     default), the guest's registry as the mirror of registry.k8s.io, a CNI
#     bridge network in /etc/cni/net.d; kubelet, kubeadm and kubectl in
#     /usr/bin, kubelet.service with kubeadm's 10-kubeadm.conf drop-in as the
#     packages ship them, /etc/crictl.yaml naming berth;
#   - `kubeadm init` with criSocket unix:///run/berth/berth.sock, the
#     coredns and kube-proxy addons skipped (no images for them are built,
#     and the node needs neither): its preflight pulls the control-plane
#     images through berth's CRI, and etcd, kube-apiserver,
#     kube-controller-manager and kube-scheduler run as static pods on berth;
#   - the node Ready, the control-plane taint removed, a Deployment whose pod
#     is scheduled, gets its service-account token from the controller
#     manager and runs;
#   - `kubeadm reset --cri-socket unix:///run/berth/berth.sock`: no static pod
#     manifest, kubeconfig, certificate or etcd data is left, no pod or
#     container in berth, no container scope or process under kubepods.slice
#     and no shim (kubelet's own empty slices stay: see the end).
#
# Prints one PASS/FAIL line per check and `kubeadm: N passed, N failed`;
# exits non-zero on any FAIL.
#
#   kubeadm.sh K8S_BIN BIN_DIR    (e.g. /mnt/share/k8s /mnt/share/bin)
#
# Environment: BERTH_KUBEADM_TIMEOUT (seconds kubeadm waits for each
# control-plane step, and this script for the node and the pod; default 1200:
# every process start is 10-50 times slower under emulation).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo_scripts="$(cd "$here/../.." && pwd)"
k8s="${1:?K8S_BIN}"
bin="${2:?BIN_DIR}"
timeout="${BERTH_KUBEADM_TIMEOUT:-1200}"
# shellcheck source=checks.sh
source "$here/checks.sh" /run/berth "$bin" 120
# shellcheck source=../../lib/cni.sh
source "$repo_scripts/lib/cni.sh"
# shellcheck source=../../lib/berthd-config.sh
source "$repo_scripts/lib/berthd-config.sh"

socket=unix:///run/berth/berth.sock
node=berth-node
# The guest has no network card: a dummy interface holds the node's address
# and a default route over it, from which kubelet and kubeadm take it.
node_ip=10.250.0.10
export KUBECONFIG=/etc/kubernetes/admin.conf
start=$SECONDS
say() { echo "kubeadm-node: [$((SECONDS - start)) s] $*"; }
finish() {
  systemctl stop kubelet.service 2>/dev/null || true
  systemctl stop berthd.service 2>/dev/null || true
  say "done"
  checks_done kubeadm
  exit
}

# ---------------------------------------------------------------- the node

ip link add berth-node0 type dummy
ip addr add "$node_ip/24" dev berth-node0
ip link set berth-node0 up
ip route add default dev berth-node0
swapoff -a
# kubelet gives pods the node's resolver config and fails a pod without one.
[[ -e /etc/resolv.conf ]] || : >/etc/resolv.conf

install -m 0755 "$k8s/kubelet" "$k8s/kubeadm" "$k8s/kubectl" /usr/bin/
install -m 0755 "$bin/crictl" /usr/bin/crictl
cat >/etc/crictl.yaml <<EOF
runtime-endpoint: $socket
image-endpoint: $socket
timeout: 120
EOF

# berth: binaries where an install puts them, its config and CNI network.
install -d /usr/local/bin /etc/berth /etc/cni/net.d
install -m 0755 "$bin/berthd" "$bin/berth-shim" "$bin/berth-pinns" /usr/local/bin/
write_bridge_network /etc/cni/net.d/10-berth.conflist berth berth0 10.85.0.0/16
write_berthd_config /etc/berth/runtime-config.toml auto /etc/cni/net.d 127.0.0.1:5000
systemd-run --unit=berthd --property=Type=exec --property=KillMode=process \
  --property=Delegate=yes --property=OOMScoreAdjust=-999 \
  /usr/local/bin/berthd --config /etc/berth/runtime-config.toml \
  --log-level "${BERTH_GUEST_LOG:-info}" >/dev/null
for _ in $(seq 600); do [[ -S /run/berth/berth.sock ]] && break; sleep 0.2; done
if [[ -S /run/berth/berth.sock ]]; then
  pass "berthd serves $socket"
else
  fail "berthd serves $socket" "$(journalctl -u berthd --no-pager | tail -n 10)"
  finish
fi

# kubelet's unit and kubeadm's drop-in, as the kubelet and kubeadm packages
# ship them; kubeadm init writes /var/lib/kubelet/config.yaml and
# kubeadm-flags.env and restarts the unit.
cat >/etc/systemd/system/kubelet.service <<'EOF'
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
EOF
mkdir -p /etc/systemd/system/kubelet.service.d
cat >/etc/systemd/system/kubelet.service.d/10-kubeadm.conf <<'EOF'
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
EOF
systemctl daemon-reload
systemctl enable kubelet.service 2>/dev/null

# ---------------------------------------------------------------- kubeadm init

version="$(kubeadm version -o short)"
# Timeouts fit for emulation, and ECDSA keys (below); everything else is
# kubeadm's default.
cat >/root/kubeadm-init.yaml <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $node_ip
nodeRegistration:
  name: $node
  criSocket: $socket
timeouts:
  controlPlaneComponentHealthCheck: ${timeout}s
  kubeletHealthCheck: ${timeout}s
  tlsBootstrap: ${timeout}s
  kubernetesAPICall: ${timeout}s
  etcdAPICall: ${timeout}s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
# ECDSA keys: every TLS handshake signs with the serving key, and RSA-2048
# signatures under emulation starve the API server into handshake timeouts.
encryptionAlgorithm: ECDSA-P256
EOF
say "kubeadm init ($version)"
init_start=$SECONDS
# The addons are skipped: coredns and kube-proxy images are not built, and
# the check needs neither (no Service traffic, no DNS lookups).
if kubeadm init --config /root/kubeadm-init.yaml \
  --skip-phases=addon/coredns,addon/kube-proxy >/root/kubeadm-init.log 2>&1; then
  pass "kubeadm init with criSocket $socket ($((SECONDS - init_start)) s)"
else
  fail "kubeadm init" "$(tail -n 30 /root/kubeadm-init.log)"
  journalctl -u kubelet --no-pager | grep -v 'mirror pod' | tail -n 30 | cut -c1-300
  cri ps -a
  finish
fi
grep -E '^\[(preflight|kubelet-start|control-plane|etcd)\]|WARNING' /root/kubeadm-init.log | head -n 30
# Where kubeadm put the runtime's endpoint for kubelet.
for f in /var/lib/kubelet/kubeadm-flags.env /var/lib/kubelet/instance-config.yaml /var/lib/kubelet/config.yaml; do
  [[ -f "$f" ]] && echo "  $f: $(grep -i -E 'runtime|cri' "$f" | tr '\n' ' ')"
done

# The control plane runs on berth, from the images the share brought.
# Under emulation kube-controller-manager and kube-scheduler may lose their
# leader lease and restart: each gets the time to run again.
running_state() { cri ps --name "^$1\$" -o json 2>/dev/null | jq -r '.containers[0].state // "none"'; }
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  for _ in $(seq "$((timeout / 5))"); do
    state="$(running_state "$c")"
    [[ "$state" == CONTAINER_RUNNING ]] && break
    sleep 5
  done
  check "static pod $c runs on berth" CONTAINER_RUNNING "$state"
  image="$(cri ps --name "^$c\$" -o json 2>/dev/null | jq -r '.containers[0].image.image // ""')"
  [[ -n "$image" ]] && echo "  $c: $(cri inspecti "$image" 2>/dev/null | jq -r '.status.repoTags[0] // "?"')"
done
check "crictl talks to berth" berth "$(cri version 2>/dev/null | awk '/RuntimeName/ {print $2}')"

# The node Ready: kubelet up against berth, berth's network ready.
ready=""
for _ in $(seq "$((timeout / 5))"); do
  ready="$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)"
  [[ "$ready" == True ]] && break
  sleep 5
done
check "node $node Ready" True "$ready"
check "kubelet took the systemd cgroup driver" systemd \
  "$(awk '/^cgroupDriver:/ {print $2}' /var/lib/kubelet/config.yaml)"
kubectl get pods -n kube-system -o wide 2>&1 | sed 's/^/  /'

# ---------------------------------------------------------------- a Deployment

# One node: the Deployment's pod must be allowed onto the control plane.
kubectl taint nodes "$node" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
kubectl create deployment hello --image=registry.k8s.io/e2e-test-images/busybox:1.29-2 \
  -- sh -c 'echo hello from berth; exec sleep 100000' >/dev/null
phase=""
for _ in $(seq "$((timeout / 5))"); do
  phase="$(kubectl get pods -l app=hello -o jsonpath='{.items[0].status.phase}' 2>/dev/null)"
  [[ "$phase" == Running ]] && break
  sleep 5
done
check "Deployment hello's pod Running" Running "$phase"
if [[ "$phase" != Running ]]; then
  kubectl describe pods -l app=hello 2>&1 | tail -n 30
  kubectl get events -A 2>&1 | tail -n 20
fi
pod="$(kubectl get pods -l app=hello -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)"
check "its log" "hello from berth" "$(kubectl logs "$pod" 2>/dev/null | head -n 1)"
check "its sandbox in berth" 1 "$(cri pods --name "^$pod\$" -q 2>/dev/null | wc -l)"
say "cluster up, Deployment running"

# ---------------------------------------------------------------- kubeadm reset

reset_start=$SECONDS
if kubeadm reset --force --cri-socket "$socket" >/root/kubeadm-reset.log 2>&1; then
  pass "kubeadm reset --cri-socket $socket ($((SECONDS - reset_start)) s)"
else
  fail "kubeadm reset" "$(tail -n 20 /root/kubeadm-reset.log)"
fi
check "kubelet stopped" inactive "$(systemctl is-active kubelet.service 2>/dev/null)"
check "no static pod manifests" "" "$(ls -A /etc/kubernetes/manifests 2>/dev/null)"
# reset empties /etc/kubernetes/pki and /var/lib/kubelet, keeping the dirs.
check "no kubeconfigs, certificates or kubelet config" "" \
  "$(ls -d /etc/kubernetes/*.conf /etc/kubernetes/pki/* /var/lib/kubelet/config.yaml \
    /var/lib/kubelet/kubeadm-flags.env 2>/dev/null)"
check "no etcd data" "" "$(ls -A /var/lib/etcd 2>/dev/null)"
check "no pods in berth" "" "$(cri pods -q 2>/dev/null)"
check "no containers in berth" "" "$(cri ps -a -q 2>/dev/null)"
# No container scope and no process is left under kubelet's slices. The
# slices themselves (kubepods.slice, its QoS and pod slices) are kubelet's
# transient units: reset stops kubelet before it removes the pods, so kubelet
# never stops them, whatever the runtime; they are empty and listed here.
check "no container scopes under kubepods.slice" "" \
  "$(find /sys/fs/cgroup/kubepods.slice -name '*.scope' 2>/dev/null)"
check "no processes under kubepods.slice" "" \
  "$(find /sys/fs/cgroup/kubepods.slice -name cgroup.procs -exec cat {} + 2>/dev/null)"
echo "  kubelet's empty slices left: $(systemctl list-units --all --no-legend --plain 'kubepods*' 2>/dev/null | awk '{print $1}' | tr '\n' ' ')"
check "no shims" "" "$(pgrep -x berth-shim)"
# kubeadm's reset documentation leaves the rest to the operator (CNI
# config, iptables, kubeconfigs) and says nothing of the slices, which stay
# the same under containerd and go at the next reboot; docs/kubeadm.md
# gives the command that removes them now. It must work: nothing in them.
systemctl stop kubepods.slice 2>/dev/null
check "systemctl stop kubepods.slice leaves no kubepods unit or cgroup" "" \
  "$(systemctl list-units --all --no-legend --plain 'kubepods*' 2>/dev/null | awk '{print $1}'
    find /sys/fs/cgroup -maxdepth 1 -name 'kubepods*' 2>/dev/null)"
finish
