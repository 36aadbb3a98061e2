# The runtime config the test scripts give berthd. Sourced.

# Registries that test images and critest name. Each is mirrored to a local
# registry, never rewritten with a prefix, which would change
# the image names critest checks.
MIRRORED_REGISTRIES=(registry.k8s.io k8s.gcr.io gcr.io public.ecr.aws docker.io)

# write_berthd_config FILE DRIVER CNI_CONF_DIR REGISTRY [EXTRA_TOML]: the
# cgroup driver, the CNI network's conf dir, every mirrored registry sent to
# http://REGISTRY, and EXTRA_TOML (whole tables, e.g. "[stream]\n...").
write_berthd_config() {
  local file="$1" driver="$2" cni_dir="$3" registry="$4" extra="${5:-}" host
  {
    echo "cgroup_driver = \"$driver\""
    echo '[cni]'
    echo "conf_dir = \"$cni_dir\""
    for host in "${MIRRORED_REGISTRIES[@]}"; do
      echo "[registry.mirrors.\"$host\"]"
      echo "endpoints = [\"http://$registry\"]"
      # The bench is offline: a missing image is NotFound from the mirror,
      # never a lookup of the real registry.
      echo "fallback_to_upstream = false"
    done
    if [[ -n "$extra" ]]; then printf '%b\n' "$extra"; fi
  } >"$file"
}
