#!/usr/bin/env bash
# The real-node stage: berth in a systemd + cgroup v2 guest (scripts/vm/),
# where cgroup_driver = "auto" resolves to systemd, as on every current
# Kubernetes node. Boots one guest and runs in it:
#
#   1. node-checks: pods under a kubelet-style slice and under the default
#      parent; containers are berth-<id>.scope units in the pod's slice with
#      their limits in cpu.max/memory.max, see only their own cgroup
#      (/proc/self/cgroup is 0::/), read their memory.max, have crictl stats
#      rows, and are gone with their pod;
#   1b. the escape suite (scripts/escape/) under the systemd driver and
#      under cgroupfs: a hostile workload must not get out;
#   1c. service-check: berth installed by scripts/install.sh as the
#      berthd systemd unit, kubelet as a unit on its socket with static
#      pods; reload applies a changed mirror, restart keeps every
#      container, uninstall --purge leaves nothing;
#   2. checkpoint-check: CheckpointContainer with CRIU (which cannot run on
#      the development host's kernel), and a restore from the archive;
#      then CheckpointPod and RestorePod of a pod of two containers;
#   3. critest v1.37.0 against berthd there, compared on the host with
#      tests/critest-expected-failures-guest.txt; then a short subset
#      (BERTH_VM_CRITEST_HANDLER_FOCUS, "none" leaves it out) with every
#      pod under RuntimeClass handler runc (the share's bin/runc, driven
#      with --systemd-cgroup; BERTH_VM_CRITEST_HANDLER=NAME=PATH another),
#      compared with the same list;
#   4. the Kubernetes stage (scripts/k8s/e2e.sh) in the guest: etcd,
#      kube-apiserver and kubelet v1.37.2 with cgroupDriver unset, which must
#      take systemd from berth, and its scenarios, among them a static pod
#      with limits (scopes in the pod's slice, gone with the pod) and
#      kubectl debug --target.
#
#   5. node conformance: Kubernetes' node e2e suite (focus
#      [NodeConformance], scripts/vm/in-guest/node-conformance.sh) with
#      kubelet as the systemd-run unit the suite makes and the systemd
#      driver, compared on the guest with
#      tests/node-conformance-expected-failures-guest.txt.
#      BERTH_VM_NODE_CONFORMANCE: "subset" (default, the guest's subset
#      below), "host-subset" (the host's CI subset of
#      scripts/k8s/node-conformance.sh), "all" (the whole focus, hours
#      under emulation; also --full), "none", or a regexp of specs to run;
#      BERTH_VM_NODE_CONFORMANCE_SKIP a regexp of specs to leave out;
#      BERTH_VM_NODE_CONFORMANCE_RUNTIME=containerd runs them against
#      containerd + runc (the pinned baseline) instead of berth;
#
#   5b. with BERTH_VM_EXEC_TIMING=1 (off by default): exec timings
#      (scripts/vm/in-guest/exec-timing.sh): `crictl exec` into a busybox
#      container of berth, of berth's handler runc and of containerd, quiet
#      and loaded, for telling an exec-bounded spec's failure berth's from
#      the emulation's;
#
#   6. with BERTH_VM_KUBEADM=1 (off by default, also in --full: it is the
#      slowest part, see docs/testing.md "The kubeadm node"): a kubeadm node
#      (scripts/vm/in-guest/kubeadm.sh): `kubeadm init` with berth's socket,
#      its control-plane static pods on berth from images built here
#      (scripts/images/build-kubeadm.sh), a Deployment's pod Running,
#      `kubeadm reset` leaving nothing of it. BERTH_VM_KUBEADM_JOB_TIMEOUT
#      (4800 s) bounds that job.
#
#   scripts/vm/stage.sh [--full]
#
# BERTH_VM_STAGE_BUDGET (seconds from the stage's start; default 3000 for
# the default parts, none with --full, BERTH_VM_KUBEADM=1 or a node
# conformance run other than a subset; 0 for none) bounds the guest's jobs
# together: a job still running at the deadline is killed and the jobs after
# it are skipped, failing the stage, so that a hung guest leaves the test
# command time to end and report.
#
# Under emulation (no KVM here) every process start is 10-50 times slower,
# so by default critest runs the focused subset BERTH_VM_CRITEST_FOCUS and
# the Kubernetes stage the scenarios BERTH_VM_K8S_FOCUS (defaults below);
# --full runs all of both. "all" runs all of one, "none" leaves it out.
# BERTH_VM_NODE_CHECKS=0, BERTH_VM_ESCAPE=0, BERTH_VM_SERVICE_CHECK=0 and
# BERTH_VM_CHECKPOINT_CHECK=0 leave out those
# parts (with both focuses "none", one part runs alone while developing it);
# BERTH_VM_ESCAPE_FOCUS (a regexp) runs only the escape probes it matches.
# Needs the debug build of scripts/test.sh ($CARGO_TARGET_DIR) and the
# Kubernetes binaries (scripts/k8s/install.sh, built when missing).
# BERTH_VM_PROFILE=release stages the release build instead (build it
# first with cargo build --release): for the full node conformance runs,
# whose specs bound waits in seconds that a debug berthd under emulation
# can overrun, and which the containerd baseline runs with release builds.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"

# The cgroup-relevant part of the suite: sandbox and container lifecycles,
# resources, stats, namespaces and exec, which all go through the driver;
# and AppArmor, which only the guest's kernel has.
default_focus='PodSandbox|Container runtime should support (basic operations|removing|execSync|listing)|should support (container|pod) stats|NamespaceOption|update container resources|UpdateContainerResources|AppArmor'
focus="${BERTH_VM_CRITEST_FOCUS:-$default_focus}"
# The node, the static pod the real-node checks need, debug --target
# (all of it: the fix it proves is in how containers join a namespace),
# kubelet's checkpoint API, which reaches CRIU only here, volume mount
# options (a noexec bind under systemd + cgroup v2 and the guest's kernel),
# and hostUsers: false pods (host-users, host-users-host-network) on the
# guest's 6.1, which cannot idmap tmpfs.
k8s_focus="${BERTH_VM_K8S_FOCUS:-^(node-ready|static-pod|debug-target|checkpoint|mount-options|host-users)}"
# The guest's subset of node conformance: what goes through the systemd
# driver and cgroup v2 (limits seen from inside, probes, hooks, volumes,
# security contexts, logs), without the specs that give a step a 20 s
# budget (image updates), which emulation cannot keep.
guest_nc_focus='(Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set|Downward API volume should provide container.s (cpu|memory) limit|Security Context When creating a (container with runAsUser should run the container with uid 65534|pod with readOnlyRootFilesystem should run the container with readonly rootfs)|Probing container should be restarted with a exec "cat /tmp/health" liveness probe|Pods should get a host IP|Secrets should be consumable via the environment|EmptyDir volumes should support \(root,0666,tmpfs\)|sig-node\] Container Lifecycle Hook .* should execute poststart http hook properly|Kubelet when scheduling a busybox command in a pod should print the output to logs).*\[NodeConformance\]'
node_conformance="${BERTH_VM_NODE_CONFORMANCE:-subset}"
nc_runtime="${BERTH_VM_NODE_CONFORMANCE_RUNTIME:-berth}"
case "$nc_runtime" in
  berth | containerd) ;;
  *)
    echo "vm-stage: BERTH_VM_NODE_CONFORMANCE_RUNTIME must be berth or containerd" >&2
    exit 2
    ;;
esac
profile="${BERTH_VM_PROFILE:-debug}"
case "$profile" in
  debug | release) ;;
  *)
    echo "vm-stage: BERTH_VM_PROFILE must be debug or release" >&2
    exit 2
    ;;
esac
if [[ "${1:-}" == --full ]]; then
  focus=all
  k8s_focus=all
  node_conformance=all
fi

log() { echo "vm-stage: $*" >&2; }

budget="${BERTH_VM_STAGE_BUDGET:-}"
if [[ -z "$budget" ]]; then
  budget=3000
  # --full has set node_conformance=all, so the case below covers it.
  if [[ "${BERTH_VM_KUBEADM:-0}" != 0 ]]; then budget=0; fi
  case "$node_conformance" in subset | host-subset | none) ;; *) budget=0 ;; esac
fi
# Read by scripts/vm/lib.sh's vm_run.
BERTH_VM_DEADLINE=""
((budget > 0)) && BERTH_VM_DEADLINE=$((EPOCHSECONDS + budget))

share="$(mktemp -d /tmp/berth-vm-share.XXXXXX)"
cleanup_share() { rm -rf "$share"; }
trap cleanup_share EXIT

kubeadm="${BERTH_VM_KUBEADM:-0}"
service_check="${BERTH_VM_SERVICE_CHECK:-1}"
k8s_args=()
exec_timing="${BERTH_VM_EXEC_TIMING:-0}"
# The service check runs kubelet too.
if [[ "$k8s_focus" != none || "$kubeadm" != 0 || "$service_check" != 0 ||
  "$node_conformance" != none || "$exec_timing" != 0 ]]; then
  log "the Kubernetes binaries (built when missing)"
  k8s_bin="$(nice -n 10 bash scripts/k8s/install.sh)"
  # The exec timings run the suite's busybox and compare with containerd.
  if [[ "$node_conformance" != none || "$exec_timing" != 0 ]]; then
    log "the node e2e suite (built when missing)"
    [[ "$(nice -n 10 bash scripts/k8s/install-node-e2e.sh)" == "$k8s_bin" ]] ||
      { log "install-node-e2e.sh installs elsewhere than install.sh"; exit 1; }
    k8s_args+=(--node-e2e)
  fi
  if [[ ("$node_conformance" != none && "$nc_runtime" == containerd) ||
    "$exec_timing" != 0 ]]; then
    k8s_args+=(--containerd)
  fi
  if [[ "$kubeadm" != 0 ]]; then
    log "kubeadm, kube-controller-manager and kube-scheduler (built when missing)"
    nice -n 10 bash scripts/k8s/install-kubeadm.sh "$k8s_bin" >/dev/null
  fi
  k8s_args+=(--k8s "$k8s_bin")
fi
log "staging binaries, tools and test images"
bash scripts/vm/share.sh "$share" --profile "$profile" "${k8s_args[@]}"
if [[ "$kubeadm" != 0 ]]; then
  log "the control-plane images kubeadm runs"
  bash scripts/images/build-kubeadm.sh "$k8s_bin" "$share/kubeadm-images/oci"
fi
# The in-guest scripts use the repository's script library; the containerd
# baseline of the node conformance run starts containerd with its scripts.
mkdir -p "$share/scripts"
cp -r scripts/lib scripts/vm scripts/k8s scripts/escape scripts/containerd "$share/scripts/"
# The node conformance run reads its results with these.
cp scripts/node_conformance_results.py scripts/critest_results.py "$share/scripts/"
mkdir -p "$share/tests"
cp tests/node-conformance-expected-failures-guest.txt "$share/tests/"
# The service check installs berth with the install script and its unit.
cp scripts/install.sh scripts/uninstall.sh "$share/scripts/"
cp -r contrib "$share/"

# shellcheck source=lib.sh
source scripts/vm/lib.sh
start=$SECONDS
vm_start "$share"
vm_wait_ready
log "guest up after $((SECONDS - start)) s"
vm_run /mnt/share/load-images.sh >&2
if [[ "$kubeadm" != 0 ]]; then
  vm_run /mnt/share/load-images.sh /mnt/share/kubeadm-images/oci >&2
fi

status=0
if [[ "${BERTH_VM_NODE_CHECKS:-1}" != 0 ]]; then
  log "node checks"
  vm_run bash /mnt/share/scripts/vm/in-guest/node-checks.sh /root/node /mnt/share/bin || status=1
fi
if [[ "${BERTH_VM_ESCAPE:-1}" != 0 ]]; then
  log "escape suite (systemd, then cgroupfs)"
  escape_focus_env=""
  [[ -n "${BERTH_VM_ESCAPE_FOCUS:-}" ]] && escape_focus_env="ESCAPE_FOCUS='$BERTH_VM_ESCAPE_FOCUS'"
  vm_sh "$escape_focus_env bash /mnt/share/scripts/vm/in-guest/escape.sh /root/escape /mnt/share/bin" ||
    status=1
fi
if [[ "$service_check" != 0 ]]; then
  log "service check (install, systemd unit, kubelet's unit, reload, restart, uninstall)"
  vm_run bash /mnt/share/scripts/vm/in-guest/service-check.sh /root/service /mnt/share/bin \
    /mnt/share/scripts /mnt/share/k8s || status=1
fi
if [[ "${BERTH_VM_CHECKPOINT_CHECK:-1}" != 0 ]]; then
  log "checkpoint check"
  vm_run bash /mnt/share/scripts/vm/in-guest/checkpoint-check.sh /root/ckpt /mnt/share/bin || status=1
fi

if [[ "$focus" != none ]]; then
  log "critest in the guest (${focus:0:60}...)"
  focus_env=""
  [[ "$focus" != all ]] && focus_env="CRITEST_FOCUS='$focus'"
  out="$(vm_out_dir)"
  vm_sh "$focus_env bash /mnt/share/scripts/vm/in-guest/critest.sh /root/critest /mnt/share/bin \"\$BERTH_VM_OUT/critest-report.json\"" || true
  if [[ -s "$out/critest-report.json" ]]; then
    partial=()
    [[ "$focus" != all ]] && partial=(--partial)
    python3 scripts/critest_results.py "$out/critest-report.json" \
      tests/critest-expected-failures-guest.txt "${partial[@]}" || status=1
  else
    log "critest wrote no report"
    status=1
  fi
fi
# The same suite with an OCI runtime binary making the containers: the
# basic lifecycle, exec and the namespace modes, a few minutes here.
# BERTH_VM_CRITEST_HANDLER=NAME=PATH (a path in the guest) picks another.
handler_focus="${BERTH_VM_CRITEST_HANDLER_FOCUS:-Container runtime should support (basic operations|execSync)|NamespaceOption}"
handler="${BERTH_VM_CRITEST_HANDLER:-runc=/mnt/share/bin/runc}"
handler_name="${handler%%=*}"
if [[ "$handler_focus" != none ]]; then
  log "critest in the guest under handler $handler_name (${handler_focus:0:60}...)"
  handler_start=$SECONDS
  out="$(vm_out_dir)"
  vm_sh "CRITEST_FOCUS='$handler_focus' CRITEST_RUNTIME_HANDLER='$handler' \
    bash /mnt/share/scripts/vm/in-guest/critest.sh /root/critest-handler /mnt/share/bin \
    \"\$BERTH_VM_OUT/critest-handler-report.json\"" || true
  if [[ -s "$out/critest-handler-report.json" ]]; then
    python3 scripts/critest_results.py "$out/critest-handler-report.json" \
      tests/critest-expected-failures-guest.txt --partial || status=1
  else
    log "critest under handler $handler_name wrote no report"
    status=1
  fi
  log "critest under handler $handler_name in $((SECONDS - handler_start)) s"
fi

if [[ "$exec_timing" != 0 ]]; then
  log "exec timings: berth, berth's handler runc and containerd"
  vm_run bash /mnt/share/scripts/vm/in-guest/exec-timing.sh /mnt/share/bin /mnt/share/containerd || status=1
fi
if [[ "$k8s_focus" != none ]]; then
  log "Kubernetes in the guest (${k8s_focus:0:60})"
  k8s_focus_env=""
  [[ "$k8s_focus" != all ]] && k8s_focus_env="BERTH_K8S_FOCUS='$k8s_focus'"
  # The guest's registry (load-images.sh) holds the test images; berthd's
  # "auto" must resolve to systemd, and kubelet take it from berth. Every
  # start is slower under emulation: the stage's start-up waits are longer.
  # The guest has no network card, so no default route for kubelet to find
  # the node's address by: a dummy interface holds one (TEST-NET-1).
  vm_sh "ip link add berth-node0 type dummy && ip addr add 192.0.2.10/32 dev berth-node0 &&
    ip link set berth-node0 up &&
    PATH=/mnt/share/bin:\$PATH BERTH_K8S_BIN=/mnt/share/k8s BERTH_K8S_REGISTRY=127.0.0.1:5000 \
    BERTH_K8S_CGROUP_DRIVER=auto BERTH_K8S_EXPECT_DRIVER=systemd BERTH_K8S_START_TIMEOUT=600 \
    BERTH_K8S_NODE_IP=192.0.2.10 $k8s_focus_env bash /mnt/share/scripts/k8s/e2e.sh /mnt/share/bin/berthd" ||
    status=1
fi
if [[ "$node_conformance" != none ]]; then
  log "node conformance in the guest ($node_conformance, against $nc_runtime)"
  nc_env=""
  case "$node_conformance" in
    subset) nc_env="BERTH_NODE_CONFORMANCE_FOCUS='$guest_nc_focus'" ;;
    host-subset) nc_env="BERTH_NODE_CONFORMANCE_SUBSET=1" ;;
    all) ;;
    *) nc_env="BERTH_NODE_CONFORMANCE_FOCUS='$node_conformance'" ;;
  esac
  nc_start=$SECONDS
  # The whole focus and its shards take hours under emulation: the job's
  # bound follows (the subsets are CI's, bounded as such).
  case "$node_conformance" in
    subset | host-subset) nc_timeout=2400 ;;
    # ginkgo's own bound (2 h by default) would cut the whole focus short.
    all) nc_timeout=21600 BERTH_NODE_CONFORMANCE_TIMEOUT="${BERTH_NODE_CONFORMANCE_TIMEOUT:-5h}" ;;
    *) nc_timeout=21600 ;;
  esac
  if [[ "$nc_runtime" == containerd ]]; then
    nc_env+=" BERTH_NODE_CONFORMANCE_RUNTIME=containerd BERTH_CONTAINERD_BIN=/mnt/share/containerd"
  fi
  if [[ -n "${BERTH_VM_NODE_CONFORMANCE_SKIP:-}" ]]; then
    nc_env+=" BERTH_NODE_CONFORMANCE_SKIP='$BERTH_VM_NODE_CONFORMANCE_SKIP'"
  fi
  BERTH_VM_JOB_TIMEOUT="${BERTH_VM_NODE_CONFORMANCE_JOB_TIMEOUT:-$nc_timeout}" \
    vm_sh "$nc_env ${BERTH_VM_NODE_CONFORMANCE_NODES:+BERTH_NODE_CONFORMANCE_NODES=$BERTH_VM_NODE_CONFORMANCE_NODES} \
    ${BERTH_NODE_CONFORMANCE_TIMEOUT:+BERTH_NODE_CONFORMANCE_TIMEOUT=$BERTH_NODE_CONFORMANCE_TIMEOUT} \
    bash /mnt/share/scripts/vm/in-guest/node-conformance.sh /mnt/share/bin /mnt/share/k8s" || status=1
  log "node conformance in $((SECONDS - nc_start)) s"
fi
if [[ "$kubeadm" != 0 ]]; then
  log "a kubeadm node on berth: init, a Deployment, reset"
  kubeadm_start=$SECONDS
  # The node's waits are each up to BERTH_KUBEADM_TIMEOUT (1200 s; init
  # alone took 1095 s at load 10): the job gets longer than the harness's
  # default 1800 s, which cut a run short in its Deployment wait.
  BERTH_VM_JOB_TIMEOUT="${BERTH_VM_KUBEADM_JOB_TIMEOUT:-4800}" \
    vm_run bash /mnt/share/scripts/vm/in-guest/kubeadm.sh /mnt/share/k8s /mnt/share/bin || status=1
  log "kubeadm node in $((SECONDS - kubeadm_start)) s"
fi
vm_stop
log "done in $((SECONDS - start)) s"
exit "$status"
