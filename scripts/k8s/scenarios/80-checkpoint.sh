# kubelet's checkpoint API (KEP-2008): POST /checkpoint/NS/POD/CONTAINER on
# kubelet's port with the admin token (the API server's node proxy refuses
# loopback nodes, see 60-stats.sh). Where CRIU can run (the
# guest), kubelet gets an archive in its checkpoints dir and the container
# runs on; where it cannot (the development host's kernel), kubelet passes
# berth's FailedPrecondition on, quoting CRIU, and the container runs on
# too. Sourced by scripts/k8s/e2e.sh.

SCENARIOS+=("checkpoint scn_checkpoint")

scn_checkpoint() {
  ensure_pod counter counter_pod
  local out code archive members
  out="$(curl -sSk --max-time 600 -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
    -w '\n%{http_code}' "https://127.0.0.1:$KUBELET_PORT/checkpoint/$NS/counter/main" 2>&1)" || true
  code="$(tail -n 1 <<<"$out")"
  out="$(sed '$d' <<<"$out")"
  if criu check >/dev/null 2>&1; then
    [[ "$code" == 200 ]] || fail "the checkpoint failed ($code): $(head -c 400 <<<"$out")"
    archive="$(jq -r '.items[0] // empty' <<<"$out")"
    [[ -f "$archive" ]] || fail "kubelet names no archive that exists: $(head -c 300 <<<"$out")"
    members="$(tar -tf "$archive")"
    grep -qx config.dump <<<"$members" || fail "$archive has no config.dump"
    grep -q '^checkpoint/' <<<"$members" || fail "$archive has no checkpoint/"
    [[ "$(tar -xOf "$archive" config.dump | jq -r .name)" == main ]] ||
      fail "config.dump does not name the container main"
  else
    [[ "$code" != 200 ]] || fail "a checkpoint without CRIU succeeded: $(head -c 300 <<<"$out")"
    grep -q "CRIU cannot run" <<<"$out" ||
      fail "the error does not say why: $(head -c 400 <<<"$out")"
  fi
  # Either way the container was not disturbed.
  [[ "$(container_state counter main)" == running ]] ||
    fail "the container is $(container_state counter main) after the checkpoint"
  [[ "$(jpath pod/counter '{.status.containerStatuses[0].restartCount}')" == 0 ]] ||
    fail "the container restarted: $(pod_summary counter)"
}
