#!/usr/bin/env bash
# The test command: installs what the tests need, builds, runs the unit and
# integration tests, then the CRI conformance suite (critest) against berthd,
# the Kubernetes stage (a real kubelet) and the real-node stage (a systemd +
# cgroup v2 guest VM).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

# Build outputs may live outside the clone so CI reuses them between runs.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# CI builds each clone once: incremental artifacts would only take disk (about
# 6 GiB per clone path), the disk the guest VM's writes also go to.
if [[ "${CI:-}" == true ]]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

bash scripts/install-deps.sh
# runc 1.5.2 (with containerd, the comparison runtime; built from the Go
# module proxy when missing): the runtime of the RuntimeClass handler tests
# (berth-shim's and tests/runtime_handlers.rs) and critest's handler run.
BERTH_TEST_RUNC="$(bash scripts/containerd/install.sh)/runc"
export BERTH_TEST_RUNC

echo "== cargo build" >&2
cargo build --workspace --locked
# Style and lints fail the run before the slow stages: unformatted code or
# any clippy warning (the workspace lints included) is an error.
echo "== cargo fmt --check" >&2
cargo fmt --all --check
echo "== cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test" >&2
# The request fuzzer's seed is pinned here, so the test command is
# reproducible; a plain `cargo test` draws a fresh one (docs/testing.md).
BERTH_FUZZ_SEED="${BERTH_FUZZ_SEED:-7}" cargo test --workspace --locked

echo "== critest" >&2
bash scripts/critest.sh "$CARGO_TARGET_DIR/debug/berthd"

# crictl and kubelet are moving to WebSocket streaming: the Streaming specs
# once more, over WebSocket (port-forward as SPDY tunnelled in WebSocket).
echo "== critest (Streaming over WebSocket)" >&2
CRITEST_FOCUS='Streaming' \
  CRITEST_EXTRA_ARGS='--websocket-exec --websocket-attach --websocket-portforward' \
  bash scripts/critest.sh "$CARGO_TARGET_DIR/debug/berthd"

# RuntimeClass: the suite once more with every pod under handler runc, an
# OCI runtime binary the shims drive (about 2 minutes), held to the same
# expected-failures list.
echo "== critest (runtime handler runc)" >&2
CRITEST_RUNTIME_HANDLER="runc=$BERTH_TEST_RUNC" \
  bash scripts/critest.sh "$CARGO_TARGET_DIR/debug/berthd"

# The run command's build (scripts/build-release.sh, as scripts/run.sh
# does it), then against that berthd: a container created, started,
# exec'd into and removed through crictl, and the escape suite, a hostile
# workload for which every way out must be closed (scripts/escape/,
# docs/testing.md).
echo "== run command's build (release)" >&2
bash scripts/build-release.sh
echo "== escape suite (release build)" >&2
bash scripts/escape.sh "$CARGO_TARGET_DIR/release/berthd"

# kubelet, kube-apiserver and kubectl v1.37.2 against berth: the scenarios
# of scripts/k8s/scenarios/ on a one-node cluster on loopback (see docs/testing.md).
# Then version skew: kubelet v1.36.4, the previous minor, with the node and
# lifecycle scenarios only (the full skew run is documented there).
# BERTH_K8S_STAGE=0 leaves both out while developing.
SKEW_FOCUS='^(node-ready|static-pod|logs|exec-websocket|resize|graceful-delete|exit-code)$'
if [[ "${BERTH_K8S_STAGE:-1}" != 0 ]]; then
  echo "== Kubernetes stage" >&2
  bash scripts/k8s/e2e.sh "$CARGO_TARGET_DIR/debug/berthd"
  echo "== Kubernetes stage, kubelet v1.36.4 (version skew, reduced)" >&2
  BERTH_K8S_VERSION=v1.36.4 BERTH_K8S_FOCUS="$SKEW_FOCUS" \
    bash scripts/k8s/e2e.sh "$CARGO_TARGET_DIR/debug/berthd"
fi

# Kubernetes' own node e2e suite (test/e2e_node, [NodeConformance]) against
# berth, a subset of a few minutes here (the full focus is a documented
# command, docs/testing.md "Node conformance"). BERTH_NODE_CONFORMANCE_STAGE=0
# leaves it out while developing.
if [[ "${BERTH_NODE_CONFORMANCE_STAGE:-1}" != 0 ]]; then
  echo "== node conformance (subset)" >&2
  BERTH_NODE_CONFORMANCE_SUBSET=1 bash scripts/k8s/node-conformance.sh "$CARGO_TARGET_DIR/debug/berthd"
fi

# Every real node runs systemd on cgroup v2; this machine does not. The
# real-node stage runs berth in such a guest VM (see docs/testing.md): node checks,
# a focused critest subset and the Kubernetes stage's node, static-pod and
# debug-target scenarios (scripts/vm/stage.sh --full runs all of both).
# BERTH_VM_STAGE=0 leaves it out while developing.
if [[ "${BERTH_VM_STAGE:-1}" != 0 ]]; then
  echo "== real-node stage (systemd + cgroup v2 guest)" >&2
  bash scripts/vm/stage.sh
fi
