#!/usr/bin/env bash
# The run command: installs runtime dependencies, builds a release, and runs
# berthd in the foreground with its defaults (/etc/berth/runtime-config.toml
# if present). Extra arguments go to berthd, e.g. `scripts/run.sh --log-level debug`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/berth/target}"

bash scripts/install-deps.sh
cargo build --release --locked -p berthd
exec "$CARGO_TARGET_DIR/release/berthd" "$@"
