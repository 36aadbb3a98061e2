# kubelet's checkpoint API (KEP-2008): POST /checkpoint/NS/POD/CONTAINER on
# kubelet's port with the admin token (the API server's node proxy refuses
# loopback nodes, see 60-stats.sh). Where CRIU can run (the
# guest), kubelet gets an archive in its checkpoints dir and the container
# runs on; the archive then becomes a checkpoint image (one layer, the
# manifest annotated as `checkpointctl build` does), pushed to the test
# registry, and a new pod naming that image resumes the counter where the
# checkpoint left it (berthd runs with allow_checkpoint_images). Where CRIU
# cannot run (the development host's kernel), kubelet passes berth's
# FailedPrecondition on, quoting CRIU, and the container runs on too.
# Sourced by scripts/k8s/e2e.sh.

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
    restore_from_checkpoint_image "$archive"
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

# push_blob REPO FILE DIGEST: one blob to the test registry (a monolithic
# upload, as the distribution API allows).
push_blob() {
  local location sep
  location="$(curl -sS -X POST -D - -o /dev/null "http://$REGISTRY/v2/$1/blobs/uploads/" |
    tr -d '\r' | awk 'tolower($1) == "location:" {print $2}')"
  [[ -n "$location" ]] || return 1
  [[ "$location" == http* ]] || location="http://$REGISTRY$location"
  sep='?'
  [[ "$location" != *\?* ]] || sep='&'
  curl -fsS -X PUT -H 'Content-Type: application/octet-stream' --data-binary "@$2" \
    "$location${sep}digest=$3" >/dev/null
}

# restore_from_checkpoint_image ARCHIVE: the archive as a checkpoint image
# in the registry, then a pod of it; its counter must go on from where the
# checkpoint caught it, not start again at line 0.
restore_from_checkpoint_image() {
  local archive="$1" dir="$WORK/checkpoint-image" repo=berth-test/counter-checkpoint
  local layer config first tag
  tag="$(date +%s)"
  mkdir -p "$dir"
  # The archive is an uncompressed tar: it is the layer as it stands.
  layer="sha256:$(sha256sum "$archive" | cut -d' ' -f1)"
  jq -n --arg l "$layer" '{architecture: "amd64", os: "linux", config: {},
      rootfs: {type: "layers", diff_ids: [$l]}}' >"$dir/config.json"
  config="sha256:$(sha256sum "$dir/config.json" | cut -d' ' -f1)"
  jq -n --arg c "$config" --arg cs "$(stat -c %s "$dir/config.json")" \
    --arg l "$layer" --arg ls "$(stat -c %s "$archive")" '{schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: ($cs | tonumber)},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: ($ls | tonumber)}],
      annotations: {"io.kubernetes.cri-o.annotations.checkpoint.name": "main"}}' >"$dir/manifest.json"
  push_blob "$repo" "$archive" "$layer" || fail "pushing the checkpoint's layer failed"
  push_blob "$repo" "$dir/config.json" "$config" || fail "pushing the image config failed"
  curl -fsS -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    --data-binary "@$dir/manifest.json" "http://$REGISTRY/v2/$repo/manifests/$tag" >/dev/null ||
    fail "pushing the checkpoint image's manifest failed"

  kubectl delete pod counter-restored --ignore-not-found --wait=true >/dev/null 2>&1 || true
  {
    pod_header counter-restored
    cat <<EOF
  containers:
  - name: main
    image: $REGISTRY/$repo:$tag
EOF
  } | pod_apply
  wait_ready counter-restored 180
  # sed, not head: head leaves as soon as it has its line, and kubectl,
  # still writing the rest, dies of SIGPIPE (141 under pipefail)
  wait_until 20 eval '[[ -n "$(kubectl logs counter-restored 2>/dev/null | sed -n 1p)" ]]' ||
    fail "the restored container logs nothing: $(pod_summary counter-restored)"
  first="$(kubectl logs counter-restored | sed -n 1p)"
  [[ "$first" =~ ^line\ ([0-9]+)$ && "${BASH_REMATCH[1]}" -gt 0 ]] ||
    fail "the restored counter begins with '$first', not where the checkpoint left it"
  echo "the pod restored from $REGISTRY/$repo:$tag counts on from '$first'"
  kubectl delete pod counter-restored --wait=true >/dev/null 2>&1 ||
    fail "the restored pod was not deleted"
}
