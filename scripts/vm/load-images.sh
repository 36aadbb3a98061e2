#!/bin/bash
# Runs in the guest (staged into the share by scripts/vm/share.sh): starts
# Debian's docker-registry on 127.0.0.1:5000 (the image's config: no auth)
# and pushes every ref of the share's OCI layout into it, under the same
# path, e.g. oci:LAYOUT:e2e-test-images/busybox:1.29-2 ->
# 127.0.0.1:5000/e2e-test-images/busybox:1.29-2.
#
#   /mnt/share/load-images.sh [LAYOUT]   (default /mnt/share/images/oci)
set -euo pipefail
layout="${1:-$(dirname "$(readlink -f "$0")")/images/oci}"
registry=127.0.0.1:5000

log() { echo "load-images: $*" >&2; }

[[ -f "$layout/index.json" ]] || {
  log "no OCI layout at $layout"
  exit 1
}

systemctl start docker-registry.service
for _ in $(seq 100); do
  curl -fs -o /dev/null --max-time 2 "http://$registry/v2/" && break
  sleep 0.2
done
curl -fsS -o /dev/null --max-time 5 "http://$registry/v2/" || {
  journalctl -u docker-registry --no-pager | tail -n 20 >&2
  log "the registry does not answer on $registry"
  exit 1
}

mapfile -t refs < <(jq -r '.manifests[].annotations["org.opencontainers.image.ref.name"] // empty' "$layout/index.json")
((${#refs[@]})) || {
  log "no refs in $layout"
  exit 1
}

# Two pushes at a time (each skopeo start is slow under emulation), never two
# tags of one repository at once: distribution 2.8 may answer 500 to
# concurrent blob checks in one repository.
push() {
  skopeo copy --quiet --dest-tls-verify=false --preserve-digests \
    "oci:$layout:$1" "docker://$registry/$1"
}
pids=()
last_repo=""
for ref in "${refs[@]}"; do
  repo="${ref%:*}"
  if [[ "$repo" == "$last_repo" ]]; then
    for p in "${pids[@]}"; do wait "$p" || exit 1; done
    pids=()
  fi
  last_repo="$repo"
  push "$ref" &
  pids+=($!)
  if ((${#pids[@]} >= 2)); then
    wait "${pids[0]}" || exit 1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
log "pushed ${#refs[@]} refs to $registry"
