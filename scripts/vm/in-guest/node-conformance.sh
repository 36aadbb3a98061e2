#!/usr/bin/env bash
# Inside the guest: Kubernetes' node e2e suite (focus [NodeConformance])
# against berthd under systemd + cgroup v2, through
# scripts/k8s/node-conformance.sh on a disposable node: kubelet is the
# systemd-run unit the suite makes (as on upstream's nodes), both kubelet
# and berthd take the systemd cgroup driver, the images come from the
# guest's registry (load-images.sh filled it from the share, where
# scripts/vm/share.sh --node-e2e put the stand-ins) and the suite's
# binaries from the share. The guest has no network card: a dummy
# interface holds the node's address, as for the Kubernetes stage, and the
# default route.
#
#   node-conformance.sh BIN_DIR K8S_DIR
#
# The run's logs and JUnit report end up in $BERTH_VM_OUT/node-conformance
# (the host's vm_out_dir). Environment: passed on to scripts/k8s/node-conformance.sh
# (BERTH_NODE_CONFORMANCE_SUBSET, _FOCUS, _SKIP, _NODES, _TIMEOUT, _KEEP,
# _RUNTIME; with containerd, BERTH_CONTAINERD_BIN names the share's copy).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
bin="${1:?BIN_DIR}"
k8s="${2:?K8S_DIR}"
export PATH="$bin:$PATH"

node_ip=192.0.2.10
if ! ip -o addr show dev berth-node0 2>/dev/null | grep -q "$node_ip"; then
  ip link add berth-node0 type dummy
  ip addr add "$node_ip/32" dev berth-node0
  ip link set berth-node0 up
fi
# The API server the suite starts finds its address by the default route
# (it takes no flag for it): one through the dummy interface, where
# packets are dropped. The guest has no network card to route off.
ip route show default | grep -q . || ip route add default dev berth-node0

# The suite writes its token file, kubeconfig and kubelet configuration
# beside its binary, and the share is read-only: a copy on the guest's disk.
suite=/var/tmp/berth-node-e2e
rm -rf "$suite"
mkdir -p "$suite"
cp "$k8s/e2e_node.test" "$k8s/ginkgo" "$k8s/kubelet" "$suite/"

BERTH_NODE_CONFORMANCE_DISPOSABLE=1 \
  BERTH_NODE_CONFORMANCE_CGROUP_DRIVER=systemd \
  BERTH_NODE_CONFORMANCE_REGISTRY=127.0.0.1:5000 \
  BERTH_NODE_E2E_BIN="$suite" \
  BERTH_NODE_CONFORMANCE_NODE_IP="$node_ip" \
  BERTH_NODE_CONFORMANCE_EXPECTED="$repo/tests/node-conformance-expected-failures-guest.txt" \
  BERTH_TEST_RUNC="$bin/runc" \
  BERTH_NODE_CONFORMANCE_LOGS_TO="${BERTH_VM_OUT:-/root}/node-conformance" \
  BERTH_NODE_CONFORMANCE_NODES="${BERTH_NODE_CONFORMANCE_NODES:-4}" \
  bash "$repo/scripts/k8s/node-conformance.sh" "$bin/berthd"
