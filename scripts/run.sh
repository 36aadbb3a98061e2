#!/usr/bin/env bash
# The run command: installs what a node needs to build and run berth
# (scripts/install-run-deps.sh, no test tools), builds a release
# (scripts/build-release.sh: berthd, berth-shim, berth-pinns), and runs
# berthd in the foreground with its defaults (/etc/berth/runtime-config.toml
# if present). Extra arguments go to berthd, e.g. `scripts/run.sh --log-level debug`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
# shellcheck source=lib/cni.sh
source "$repo/scripts/lib/cni.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"

bash scripts/install-run-deps.sh

# Pods need a CNI network. When the config dir has none, write a default:
# a bridge with NAT to the outside, host ports (portmap), and a /16 so that
# hundreds of pods fit. BERTH_CNI_CONF_DIR, BERTH_CNI_BRIDGE and
# BERTH_CNI_SUBNET change it; an existing config is never touched. Its name
# sorts after every usual one (10-calico, 10-flannel, 05-cilium, ...): the
# first file by name wins, so a network add-on installed later takes over
# without anyone removing this file.
cni_conf_dir="${BERTH_CNI_CONF_DIR:-/etc/cni/net.d}"
cni_bridge="${BERTH_CNI_BRIDGE:-berth0}"
cni_subnet="${BERTH_CNI_SUBNET:-10.88.0.0/16}"
mkdir -p "$cni_conf_dir"
if ! ls "$cni_conf_dir" | grep -qE '\.(conf|conflist|json)$'; then
  echo "run.sh: writing $cni_conf_dir/99-berth.conflist (bridge $cni_bridge, subnet $cni_subnet)" >&2
  write_bridge_network "$cni_conf_dir/99-berth.conflist" berth "$cni_bridge" "$cni_subnet"
fi

bash scripts/build-release.sh
exec "$CARGO_TARGET_DIR/release/berthd" "$@"
