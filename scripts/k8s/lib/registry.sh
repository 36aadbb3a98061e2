# shellcheck shell=bash
# The local registry the Kubernetes stages pull from, for scripts/k8s/e2e.sh
# and node-conformance.sh (which set repo and log).

# use_registry WORK REGISTRY PRELOADED PORT PUSH...: with PRELOADED set (a
# registry that already holds the images: the guest's), checks that
# REGISTRY answers; otherwise starts one on 127.0.0.1:PORT in WORK/registry
# and runs PUSH to fill it. Logs go to WORK/logs; a failure ends the script.
use_registry() {
  local work="$1" registry="$2" preloaded="$3" port="$4"
  shift 4
  if [[ -n "$preloaded" ]]; then
    curl -fsS -o /dev/null --max-time 5 "http://$registry/v2/" || {
      log "no registry answers on http://$registry/v2/"
      exit 1
    }
    log "images from the registry at $registry"
    return 0
  fi
  log "starting the local registry on $registry and pushing the stand-in images"
  BERTH_REGISTRY_ADDR="127.0.0.1:$port" \
    bash "$repo/scripts/registry.sh" start "$work/registry" 2>"$work/logs/registry-start.log" || {
    cat "$work/logs/registry-start.log" >&2
    exit 1
  }
  "$@" >"$work/logs/images.log" 2>&1 || {
    tail -n 30 "$work/logs/images.log" >&2
    exit 1
  }
}

# registry_refs ADDR: every repository and tag the registry at ADDR holds,
# as repo:tag lines (a repository without tags gives none); fails when the
# registry does not answer.
registry_refs() {
  local addr="$1" repos r
  repos="$(curl -fsS "http://$addr/v2/_catalog?n=1000" | jq -r '.repositories[]')" || return 1
  for r in $repos; do
    curl -fsS "http://$addr/v2/$r/tags/list" |
      jq -r --arg r "$r" '.tags // [] | .[] | "\($r):\(.)"' || return 1
  done
}
