# A berthd of a test stage's own on this host, and the registry with the
# test images it pulls from. Sourced; needs $repo (the repository root).

# push_test_images WORK REGISTRY: starts the local registry with its
# storage in WORK/registry (BERTH_REGISTRY_ADDR) and pushes the images of
# scripts/images/build.sh to REGISTRY; the build's log is WORK/images.log.
push_test_images() {
  bash "$repo/scripts/registry.sh" start "$1/registry" >&2
  bash "$repo/scripts/images/build.sh" "$2" >"$1/images.log" 2>&1 || {
    tail -n 40 "$1/images.log" >&2
    return 1
  }
}

# start_test_berthd BERTHD WORK: BERTHD with WORK/runtime-config.toml on
# WORK/berth.sock, root WORK/root, state WORK/state, debug log in
# WORK/berthd.log; sets berthd_pid and waits up to 10 s for the socket.
start_test_berthd() {
  local berthd="$1" work="$2"
  "$berthd" --config "$work/runtime-config.toml" --listen "$work/berth.sock" \
    --root "$work/root" --state "$work/state" --log-level debug \
    >"$work/berthd.log" 2>&1 &
  berthd_pid=$!
  for _ in $(seq 100); do [[ -S "$work/berth.sock" ]] && return 0; sleep 0.1; done
  cat "$work/berthd.log" >&2
  echo "berthd did not start" >&2
  return 1
}
