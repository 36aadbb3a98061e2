#!/usr/bin/env bash
# Installs what building and running berth on a node needs, only when
# missing: a C toolchain and libseccomp for the build (berth-shim links
# libseccomp), the CNI plugins and the tools pods' networking uses, and
# CRIU for checkpoints. Nothing of the test bench (scripts/install-deps.sh).
set -euo pipefail

APT_PACKAGES=(
  gcc libc6-dev pkg-config     # build scripts of native crates
  libseccomp-dev               # libcontainer's seccomp support (berth-shim)
  libelf-dev zlib1g-dev make   # libbpf, which libbpf-sys builds for the v2 device
                               # filter (build only: no libelf or libz is linked)
  containernetworking-plugins  # CNI plugins (bridge, host-local, portmap, ...)
  iproute2 iptables            # netns, veth, NAT and host ports
  criu                         # CheckpointContainer (see docs/runtime.md "Checkpoints")
)

# shellcheck source=lib/apt.sh
source "$(dirname "$0")/lib/apt.sh"
apt_install_missing install-run-deps "${APT_PACKAGES[@]}"
