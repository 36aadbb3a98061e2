#!/usr/bin/env bash
# Builds the release binaries berthd runs with: berthd and the helpers it
# starts from the directory it runs from (berth-shim, berth-pinns). The run
# command builds with it, and so does the test command, which then runs
# the escape suite against what it built.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"
cargo build --release --locked -p berthd -p berth-pinns -p berth-shim
